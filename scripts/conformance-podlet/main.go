// Command podlet stands in for the kubelet and the Deployment and EndpointSlice
// controllers on a cluster that has only an API server (scripts/k8s-env), for the
// Gateway API conformance run (scripts/conformance).
//
// Every Deployment whose container runs the echo-basic image becomes `replicas` local
// echo-basic processes, each in its own network namespace with its own address
// (10.240.N.2, host side 10.240.N.1 on a veth pair), plus a Pod object marked Running and
// Ready with that address. Every Service with a selector gets one EndpointSlice listing
// the Ready Pods it selects. Deployments of other images get no Pods (logged once).
//
// It also serves what the API server asks a kubelet for Pod logs: it registers a Node
// (its address and kubelet port) and answers /containerLogs/NS/POD/CONTAINER over HTTPS
// with each echo-basic's output, timestamped as it was written (sinceTime, sinceSeconds,
// tailLines, timestamps honoured), so `kubectl logs` and the suite's log readers work.
// Everything is reconciled by polling the API server; SIGINT/SIGTERM stops the
// processes, removes the network namespaces and exits.
package main

import (
	"bufio"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"flag"
	"fmt"
	"log"
	"math/big"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
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

func (p *podlet) logPath(ns, name string) string {
	return filepath.Join(p.opts.workDir, "logs", ns+"_"+name+".log")
}

// serveKubeletLogs starts the HTTPS log endpoint on 127.0.0.1 (self-signed certificate:
// the API server does not verify kubelets when it has no --kubelet-certificate-authority)
// and registers the Node that points at it.
func (p *podlet) serveKubeletLogs(ctx context.Context) error {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1),
		Subject:      pkix.Name{CommonName: nodeName},
		IPAddresses:  []net.IP{net.IPv4(127, 0, 0, 1)},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /containerLogs/{ns}/{pod}/{container}", p.containerLogs)
	srv := &http.Server{
		Handler:           mux,
		ReadHeaderTimeout: 10 * time.Second,
		TLSConfig:         &tls.Config{Certificates: []tls.Certificate{{Certificate: [][]byte{der}, PrivateKey: key}}},
	}
	go func() { _ = srv.ServeTLS(ln, "", "") }()
	go func() { <-ctx.Done(); _ = srv.Close() }()
	port := int32(ln.Addr().(*net.TCPAddr).Port)

	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: nodeName, Annotations: map[string]string{"weir.dev/podlet": managedBy}}}
	_ = p.cs.CoreV1().Nodes().Delete(ctx, nodeName, metav1.DeleteOptions{})
	created, err := p.cs.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{})
	if err != nil {
		return fmt.Errorf("creating Node %s: %v", nodeName, err)
	}
	created.Status.Addresses = []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "127.0.0.1"}}
	created.Status.DaemonEndpoints.KubeletEndpoint.Port = port
	if _, err := p.cs.CoreV1().Nodes().UpdateStatus(ctx, created, metav1.UpdateOptions{}); err != nil {
		return fmt.Errorf("Node %s status: %v", nodeName, err)
	}
	log.Printf("kubelet log endpoint https://127.0.0.1:%d (Node %s)", port, nodeName)
	return nil
}

// containerLogs answers like the kubelet's /containerLogs for the Pods this podlet runs.
func (p *podlet) containerLogs(w http.ResponseWriter, r *http.Request) {
	ns, name := r.PathValue("ns"), r.PathValue("pod")
	q := r.URL.Query()
	var since time.Time
	if v := q.Get("sinceTime"); v != "" {
		t, err := time.Parse(time.RFC3339, v)
		if err != nil {
			http.Error(w, "bad sinceTime", http.StatusBadRequest)
			return
		}
		since = t
	}
	if v := q.Get("sinceSeconds"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil {
			http.Error(w, "bad sinceSeconds", http.StatusBadRequest)
			return
		}
		since = time.Now().Add(-time.Duration(n) * time.Second)
	}
	p.logMu.Lock()
	data, err := os.ReadFile(p.logPath(ns, name))
	p.logMu.Unlock()
	if err != nil {
		http.Error(w, "no such container", http.StatusNotFound)
		return
	}
	var lines []string
	for _, line := range strings.Split(strings.TrimSuffix(string(data), "\n"), "\n") {
		ts, text, ok := strings.Cut(line, " ")
		t, err := time.Parse(time.RFC3339Nano, ts)
		if !ok || err != nil || t.Before(since) {
			continue
		}
		if q.Get("timestamps") == "true" {
			text = line
		}
		lines = append(lines, text)
	}
	if v := q.Get("tailLines"); v != "" {
		if n, err := strconv.Atoi(v); err == nil && n >= 0 && n < len(lines) {
			lines = lines[len(lines)-n:]
		}
	}
	w.Header().Set("Content-Type", "text/plain")
	for _, l := range lines {
		fmt.Fprintln(w, l)
	}
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
	// Resolve the environment first: a Secret it mounts may not exist yet (retried on the
	// next pass, with nothing to undo).
	env, err := p.containerEnv(ctx, d, name)
	if err != nil {
		return err
	}
	// Leftovers of an earlier attempt: the host side of the veth pair goes away only
	// asynchronously when its namespace is deleted, so it is removed explicitly.
	_ = run("ip", "netns", "del", netns)
	_ = run("ip", "link", "del", hostIf)
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
			_ = run("ip", "link", "del", hostIf)
			return err
		}
	}
	logPath := p.logPath(d.Namespace, name)
	if err := os.MkdirAll(filepath.Dir(logPath), 0o755); err != nil {
		_ = run("ip", "netns", "del", netns)
		return err
	}
	logFile, err := os.Create(logPath)
	if err != nil {
		_ = run("ip", "netns", "del", netns)
		return err
	}
	out, in, err := os.Pipe()
	if err != nil {
		logFile.Close()
		_ = run("ip", "netns", "del", netns)
		return err
	}
	cmd := exec.Command("ip", "netns", "exec", netns, p.opts.echoBasic)
	cmd.Env = env
	cmd.Stdout, cmd.Stderr = in, in
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		logFile.Close()
		out.Close()
		in.Close()
		_ = run("ip", "netns", "del", netns)
		return err
	}
	in.Close()
	// Each output line is stored as "<RFC3339Nano time> <line>", as a container runtime
	// does, so that log readers can ask for lines since a time.
	copied := make(chan struct{})
	go func() {
		sc := bufio.NewScanner(out)
		sc.Buffer(make([]byte, 64*1024), 1024*1024)
		for sc.Scan() {
			p.logMu.Lock()
			fmt.Fprintf(logFile, "%s %s\n", time.Now().UTC().Format(time.RFC3339Nano), sc.Text())
			p.logMu.Unlock()
		}
		out.Close()
		close(copied)
	}()
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); <-copied; logFile.Close(); close(exited) }()
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
	obj.Spec.NodeName = nodeName
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
	for _, c := range obj.Spec.Containers {
		obj.Status.ContainerStatuses = append(obj.Status.ContainerStatuses, corev1.ContainerStatus{
			Name:    c.Name,
			Image:   c.Image,
			ImageID: c.Image,
			Ready:   true,
			Started: ptr(true),
			State:   corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: now}},
		})
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
	_ = p.cs.CoreV1().Nodes().Delete(ctx, nodeName, metav1.DeleteOptions{})
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
