// Command podlet stands in for the kubelet and the Deployment and EndpointSlice
// controllers on a cluster that has only an API server (scripts/k8s-env), for the
// Gateway API conformance run (scripts/conformance).
//
// Every Deployment whose container runs the echo-basic image becomes `replicas` local
// echo-basic processes, each in its own network namespace with its own address
// (10.240.N.2, host side 10.240.N.1 on a veth pair), plus a Pod object marked Running and
// Ready with that address. Every Service with a selector gets one EndpointSlice listing
// the Ready Pods it selects. The CoreDNS Deployment of the UDPRoute tests runs this
// binary's DNS stand-in instead (dns.go). Deployments of other images get no Pods
// (logged once).
//
// It also serves what the API server asks a kubelet for Pod logs: it registers a Node
// (its address and kubelet port) and answers /containerLogs/NS/POD/CONTAINER over HTTPS
// with each echo-basic's output, timestamped as it was written (sinceTime, sinceSeconds,
// tailLines, timestamps honoured), so `kubectl logs` and the suite's log readers work.
// Everything is reconciled by polling the API server; SIGINT/SIGTERM stops the
// processes, removes the network namespaces and exits.
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"os"
	"os/exec"
	"os/signal"
	"strings"
	"sync"
	"syscall"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
)

const (
	managedBy = "weir-conformance-podlet"
	nodeName  = "weir-conformance-node"
)

type options struct {
	echoBasic string
	prefix    string
	subnet    int
	workDir   string
	interval  time.Duration
}

// pod is one running echo-basic process in its network namespace.
type pod struct {
	ns, name, deployment string
	slot                 int
	netns                string
	cmd                  *exec.Cmd
	exited               chan struct{}
	ip                   string
	ready                bool
	// How readiness is checked: "tcp" (connect to probeAddr) or "udp" (a datagram to
	// probeAddr is answered).
	probeNet, probeAddr string
	probePayload        []byte
}

type podlet struct {
	opts    options
	cs      kubernetes.Interface
	logMu   sync.Mutex      // guards the log files' appends against the log server's reads
	pods    map[string]*pod // ns/name
	slots   map[int]bool
	skipped map[string]bool // deployments that cannot run here, logged once
}

func main() {
	var opts options
	kubeconfig := flag.String("kubeconfig", os.Getenv("KUBECONFIG"), "kubeconfig of the API server")
	flag.StringVar(&opts.echoBasic, "echo-basic", "", "path of the echo-basic binary")
	flag.StringVar(&opts.prefix, "prefix", "wconf", "prefix of network namespace and interface names")
	flag.IntVar(&opts.subnet, "subnet", 240, "pods get 10.SUBNET.N.2/24 (N = 1..250)")
	flag.StringVar(&opts.workDir, "work-dir", "", "where mounted Secrets are written")
	flag.DurationVar(&opts.interval, "interval", 300*time.Millisecond, "reconcile period")
	dnsStandIn := flag.String("dns-stand-in", "", "serve the CoreDNS stand-in on this UDP address and nothing else")
	flag.Parse()
	if *dnsStandIn != "" {
		serveDNSStandIn(*dnsStandIn)
		return
	}
	if opts.echoBasic == "" || opts.workDir == "" {
		log.Fatal("--echo-basic and --work-dir are required")
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", *kubeconfig)
	if err != nil {
		log.Fatalf("kubeconfig: %v", err)
	}
	cfg.QPS, cfg.Burst = 200, 400
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		log.Fatalf("client: %v", err)
	}
	p := &podlet{opts: opts, cs: cs, pods: map[string]*pod{}, slots: map[int]bool{}, skipped: map[string]bool{}}
	ctx, cancel := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer cancel()
	if err := p.serveKubeletLogs(ctx); err != nil {
		log.Fatalf("kubelet log endpoint: %v", err)
	}
	defer p.stopAll()
	tick := time.NewTicker(opts.interval)
	defer tick.Stop()
	for {
		if err := p.reconcile(ctx); err != nil && ctx.Err() == nil {
			log.Printf("reconcile: %v", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

func (p *podlet) reconcile(ctx context.Context) error {
	deps, err := p.cs.AppsV1().Deployments("").List(ctx, metav1.ListOptions{})
	if err != nil {
		return err
	}
	want := map[string]bool{}
	for i := range deps.Items {
		d := &deps.Items[i]
		if d.DeletionTimestamp != nil {
			continue
		}
		key := d.Namespace + "/" + d.Name
		if !runsEchoBasic(d) && !runsCoreDNS(d) {
			if !p.skipped[key] {
				p.skipped[key] = true
				log.Printf("deployment %s: image %q cannot run here (only echo-basic can); no pods", key, d.Spec.Template.Spec.Containers[0].Image)
			}
			continue
		}
		replicas := 1
		if d.Spec.Replicas != nil {
			replicas = int(*d.Spec.Replicas)
		}
		for i := 0; i < replicas; i++ {
			name := fmt.Sprintf("%s-%s-%d", d.Name, p.opts.prefix, i)
			want[d.Namespace+"/"+name] = true
			if _, ok := p.pods[d.Namespace+"/"+name]; !ok {
				if err := p.startPod(ctx, d, name); err != nil {
					log.Printf("pod %s/%s: %v", d.Namespace, name, err)
				}
			}
		}
	}
	for key, pd := range p.pods {
		exited := false
		select {
		case <-pd.exited:
			exited = true
		default:
		}
		if !want[key] || exited {
			if exited {
				log.Printf("pod %s: echo-basic exited; restarting", key)
			}
			p.stopPod(ctx, pd)
		}
	}
	for _, pd := range p.pods {
		if !pd.ready {
			p.markReady(ctx, pd)
		}
	}
	return p.reconcileSlices(ctx)
}

func runsEchoBasic(d *appsv1.Deployment) bool {
	c := d.Spec.Template.Spec.Containers
	return len(c) == 1 && strings.Contains(c[0].Image, "echo-basic")
}

func runsCoreDNS(d *appsv1.Deployment) bool {
	c := d.Spec.Template.Spec.Containers
	return len(c) == 1 && strings.Contains(c[0].Image, "coredns/coredns")
}

func (p *podlet) freeSlot() (int, error) {
	for n := 1; n <= 250; n++ {
		if !p.slots[n] {
			return n, nil
		}
	}
	return 0, fmt.Errorf("no free address slot (250 pods)")
}

func run(args ...string) error {
	out, err := exec.Command(args[0], args[1:]...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("%s: %v: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}

func ptr[T any](v T) *T { return &v }
