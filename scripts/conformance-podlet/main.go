// Command podlet stands in for the kubelet and the Deployment and EndpointSlice
// controllers on a cluster that has only an API server (scripts/k8s-env), for the
// Gateway API conformance run (scripts/conformance).
//
// Every Deployment whose container runs the echo-basic image becomes `replicas` local
// echo-basic processes, each in its own network namespace with its own address
// (10.240.N.2, host side 10.240.N.1 on a veth pair), plus a Pod object marked Running and
// Ready with that address. Every Service with a selector gets one EndpointSlice listing
// the Ready Pods it selects. Deployments of other images get no Pods (logged once).
// Everything is reconciled by polling the API server; SIGINT/SIGTERM stops the
// processes, removes the network namespaces and exits.
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
)

const managedBy = "weir-conformance-podlet"

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
}

type podlet struct {
	opts    options
	cs      kubernetes.Interface
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
	flag.Parse()
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
		if !runsEchoBasic(d) {
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

func (p *podlet) startPod(ctx context.Context, d *appsv1.Deployment, name string) error {
	n, err := p.freeSlot()
	if err != nil {
		return err
	}
	netns := fmt.Sprintf("%s-%d", p.opts.prefix, n)
	hostIf, podIf := fmt.Sprintf("%sh%d", p.opts.prefix, n), fmt.Sprintf("%sp%d", p.opts.prefix, n)
	ip := fmt.Sprintf("10.%d.%d.2", p.opts.subnet, n)
	_ = run("ip", "netns", "del", netns)
	steps := [][]string{
		{"ip", "netns", "add", netns},
		{"ip", "link", "add", hostIf, "type", "veth", "peer", "name", podIf},
		{"ip", "link", "set", podIf, "netns", netns},
		{"ip", "addr", "add", fmt.Sprintf("10.%d.%d.1/24", p.opts.subnet, n), "dev", hostIf},
		{"ip", "link", "set", hostIf, "up"},
		{"ip", "netns", "exec", netns, "ip", "addr", "add", ip + "/24", "dev", podIf},
		{"ip", "netns", "exec", netns, "ip", "link", "set", podIf, "up"},
		{"ip", "netns", "exec", netns, "ip", "link", "set", "lo", "up"},
	}
	for _, s := range steps {
		if err := run(s...); err != nil {
			_ = run("ip", "netns", "del", netns)
			return err
		}
	}
	env, err := p.containerEnv(ctx, d, name)
	if err != nil {
		_ = run("ip", "netns", "del", netns)
		return err
	}
	logPath := filepath.Join(p.opts.workDir, "logs", d.Namespace+"_"+name+".log")
	_ = os.MkdirAll(filepath.Dir(logPath), 0o755)
	logFile, err := os.Create(logPath)
	if err != nil {
		return err
	}
	cmd := exec.Command("ip", "netns", "exec", netns, p.opts.echoBasic)
	cmd.Env = env
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		logFile.Close()
		_ = run("ip", "netns", "del", netns)
		return err
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); logFile.Close(); close(exited) }()
	p.slots[n] = true
	pd := &pod{ns: d.Namespace, name: name, deployment: d.Name, slot: n, netns: netns, cmd: cmd, exited: exited, ip: ip}
	p.pods[d.Namespace+"/"+name] = pd

	tmpl := d.Spec.Template.DeepCopy()
	obj := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Name:        name,
			Namespace:   d.Namespace,
			Labels:      tmpl.Labels,
			Annotations: map[string]string{"weir.dev/podlet": managedBy},
		},
		Spec: tmpl.Spec,
	}
	obj.Spec.NodeName = "weir-conformance-node"
	_ = p.cs.CoreV1().Pods(d.Namespace).Delete(ctx, name, metav1.DeleteOptions{GracePeriodSeconds: new(int64)})
	if _, err := p.cs.CoreV1().Pods(d.Namespace).Create(ctx, obj, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("creating the Pod: %v", err)
	}
	log.Printf("pod %s/%s: echo-basic started in %s at %s", d.Namespace, name, netns, ip)
	return nil
}

// containerEnv resolves the container's environment the way the kubelet would for the
// fields echo-basic reads; Secret volumes are written under work-dir and paths in env
// values that point into their mount paths are rewritten.
func (p *podlet) containerEnv(ctx context.Context, d *appsv1.Deployment, name string) ([]string, error) {
	c := d.Spec.Template.Spec.Containers[0]
	mounts := map[string]string{} // mountPath -> local dir
	for _, vm := range c.VolumeMounts {
		for _, v := range d.Spec.Template.Spec.Volumes {
			if v.Name != vm.Name || v.Secret == nil {
				continue
			}
			s, err := p.cs.CoreV1().Secrets(d.Namespace).Get(ctx, v.Secret.SecretName, metav1.GetOptions{})
			if err != nil {
				return nil, fmt.Errorf("secret volume %s: %v", v.Secret.SecretName, err)
			}
			dir := filepath.Join(p.opts.workDir, "volumes", d.Namespace, name, v.Name)
			if err := os.MkdirAll(dir, 0o700); err != nil {
				return nil, err
			}
			items := v.Secret.Items
			if len(items) == 0 {
				for k := range s.Data {
					items = append(items, corev1.KeyToPath{Key: k, Path: k})
				}
			}
			for _, it := range items {
				if err := os.WriteFile(filepath.Join(dir, it.Path), s.Data[it.Key], 0o600); err != nil {
					return nil, err
				}
			}
			mounts[vm.MountPath] = dir
		}
	}
	env := []string{"PATH=" + os.Getenv("PATH")}
	for _, e := range c.Env {
		val := e.Value
		if e.ValueFrom != nil && e.ValueFrom.FieldRef != nil {
			switch e.ValueFrom.FieldRef.FieldPath {
			case "metadata.name":
				val = name
			case "metadata.namespace":
				val = d.Namespace
			default:
				return nil, fmt.Errorf("env %s: fieldRef %s is not supported", e.Name, e.ValueFrom.FieldRef.FieldPath)
			}
		}
		for mp, dir := range mounts {
			if strings.HasPrefix(val, mp+"/") {
				val = dir + strings.TrimPrefix(val, mp)
			}
		}
		env = append(env, e.Name+"="+val)
	}
	return env, nil
}

// markReady marks the Pod Running and Ready once echo-basic accepts connections.
func (p *podlet) markReady(ctx context.Context, pd *pod) {
	conn, err := net.DialTimeout("tcp", pd.ip+":3000", 100*time.Millisecond)
	if err != nil {
		return
	}
	conn.Close()
	obj, err := p.cs.CoreV1().Pods(pd.ns).Get(ctx, pd.name, metav1.GetOptions{})
	if err != nil {
		log.Printf("pod %s/%s: %v", pd.ns, pd.name, err)
		return
	}
	now := metav1.Now()
	obj.Status = corev1.PodStatus{
		Phase:     corev1.PodRunning,
		HostIP:    fmt.Sprintf("10.%d.%d.1", p.opts.subnet, pd.slot),
		PodIP:     pd.ip,
		PodIPs:    []corev1.PodIP{{IP: pd.ip}},
		StartTime: &now,
		Conditions: []corev1.PodCondition{
			{Type: corev1.PodScheduled, Status: corev1.ConditionTrue, LastTransitionTime: now},
			{Type: corev1.PodInitialized, Status: corev1.ConditionTrue, LastTransitionTime: now},
			{Type: corev1.ContainersReady, Status: corev1.ConditionTrue, LastTransitionTime: now},
			{Type: corev1.PodReady, Status: corev1.ConditionTrue, LastTransitionTime: now},
		},
	}
	if _, err := p.cs.CoreV1().Pods(pd.ns).UpdateStatus(ctx, obj, metav1.UpdateOptions{}); err != nil {
		log.Printf("pod %s/%s: status: %v", pd.ns, pd.name, err)
		return
	}
	pd.ready = true
	log.Printf("pod %s/%s: Ready", pd.ns, pd.name)
}

func (p *podlet) stopPod(ctx context.Context, pd *pod) {
	if pd.cmd.Process != nil {
		_ = pd.cmd.Process.Kill()
	}
	select {
	case <-pd.exited:
	case <-time.After(5 * time.Second):
		log.Printf("pod %s/%s: echo-basic did not exit within 5 s", pd.ns, pd.name)
	}
	_ = run("ip", "netns", "del", pd.netns)
	delete(p.slots, pd.slot)
	delete(p.pods, pd.ns+"/"+pd.name)
	if ctx.Err() == nil {
		err := p.cs.CoreV1().Pods(pd.ns).Delete(ctx, pd.name, metav1.DeleteOptions{GracePeriodSeconds: new(int64)})
		if err != nil && !apierrors.IsNotFound(err) {
			log.Printf("pod %s/%s: delete: %v", pd.ns, pd.name, err)
		}
	}
}

func (p *podlet) stopAll() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, pd := range p.pods {
		p.stopPod(ctx, pd)
	}
}

// reconcileSlices writes one EndpointSlice per Service with a selector.
func (p *podlet) reconcileSlices(ctx context.Context) error {
	svcs, err := p.cs.CoreV1().Services("").List(ctx, metav1.ListOptions{})
	if err != nil {
		return err
	}
	pods, err := p.cs.CoreV1().Pods("").List(ctx, metav1.ListOptions{})
	if err != nil {
		return err
	}
	slices, err := p.cs.DiscoveryV1().EndpointSlices("").List(ctx, metav1.ListOptions{
		LabelSelector: "endpointslice.kubernetes.io/managed-by=" + managedBy,
	})
	if err != nil {
		return err
	}
	existing := map[string]*discoveryv1.EndpointSlice{}
	for i := range slices.Items {
		s := &slices.Items[i]
		existing[s.Namespace+"/"+s.Name] = s
	}
	seen := map[string]bool{}
	for i := range svcs.Items {
		svc := &svcs.Items[i]
		if len(svc.Spec.Selector) == 0 || svc.DeletionTimestamp != nil {
			continue
		}
		sel := labels.SelectorFromSet(svc.Spec.Selector)
		var eps []discoveryv1.Endpoint
		for j := range pods.Items {
			pd := &pods.Items[j]
			if pd.Namespace != svc.Namespace || pd.Status.PodIP == "" || !sel.Matches(labels.Set(pd.Labels)) || !podReady(pd) || pd.DeletionTimestamp != nil {
				continue
			}
			eps = append(eps, discoveryv1.Endpoint{
				Addresses:  []string{pd.Status.PodIP},
				Conditions: discoveryv1.EndpointConditions{Ready: ptr(true), Serving: ptr(true), Terminating: ptr(false)},
				NodeName:   ptr(pd.Spec.NodeName),
				TargetRef:  &corev1.ObjectReference{Kind: "Pod", Namespace: pd.Namespace, Name: pd.Name, UID: pd.UID},
			})
		}
		sort.Slice(eps, func(a, b int) bool { return eps[a].Addresses[0] < eps[b].Addresses[0] })
		var ports []discoveryv1.EndpointPort
		for _, sp := range svc.Spec.Ports {
			target := sp.Port
			if sp.TargetPort.Type == intstr.Int && sp.TargetPort.IntVal != 0 {
				target = sp.TargetPort.IntVal
			}
			ports = append(ports, discoveryv1.EndpointPort{
				Name: ptr(sp.Name), Protocol: ptr(sp.Protocol), Port: ptr(target), AppProtocol: sp.AppProtocol,
			})
		}
		name := svc.Name + "-" + p.opts.prefix
		key := svc.Namespace + "/" + name
		seen[key] = true
		want := &discoveryv1.EndpointSlice{
			ObjectMeta: metav1.ObjectMeta{
				Name:      name,
				Namespace: svc.Namespace,
				Labels: map[string]string{
					discoveryv1.LabelServiceName: svc.Name,
					discoveryv1.LabelManagedBy:   managedBy,
				},
				OwnerReferences: []metav1.OwnerReference{{APIVersion: "v1", Kind: "Service", Name: svc.Name, UID: svc.UID}},
			},
			AddressType: discoveryv1.AddressTypeIPv4,
			Endpoints:   eps,
			Ports:       ports,
		}
		if old, ok := existing[key]; ok {
			if sameSlice(old, want) {
				continue
			}
			want.ResourceVersion = old.ResourceVersion
			if _, err := p.cs.DiscoveryV1().EndpointSlices(svc.Namespace).Update(ctx, want, metav1.UpdateOptions{}); err != nil {
				log.Printf("endpointslice %s: %v", key, err)
			}
			continue
		}
		if _, err := p.cs.DiscoveryV1().EndpointSlices(svc.Namespace).Create(ctx, want, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			log.Printf("endpointslice %s: %v", key, err)
		} else {
			log.Printf("endpointslice %s: %d endpoints", key, len(eps))
		}
	}
	for key, s := range existing {
		if !seen[key] {
			_ = p.cs.DiscoveryV1().EndpointSlices(s.Namespace).Delete(ctx, s.Name, metav1.DeleteOptions{})
		}
	}
	return nil
}

func sameSlice(a, b *discoveryv1.EndpointSlice) bool {
	return equality.Semantic.DeepEqual(a.Endpoints, b.Endpoints) && equality.Semantic.DeepEqual(a.Ports, b.Ports) &&
		len(a.OwnerReferences) == 1 && a.OwnerReferences[0].UID == b.OwnerReferences[0].UID
}

func podReady(pd *corev1.Pod) bool {
	for _, c := range pd.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

func ptr[T any](v T) *T { return &v }
