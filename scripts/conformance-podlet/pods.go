// Pods: echo-basic processes in network namespaces, and their Pod objects.

package main

import (
	"bufio"
	"context"
	"fmt"
	"log"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

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
	probeNet, probeAddr, probePayload := "tcp", ip+":3000", []byte(nil)
	if runsCoreDNS(d) {
		self, err := os.Executable()
		if err != nil {
			_ = run("ip", "netns", "del", netns)
			return err
		}
		cmd = exec.Command("ip", "netns", "exec", netns, self, "--dns-stand-in", ":53")
		probeNet, probeAddr, probePayload = "udp", ip+":53", dnsProbe()
	} else if envValue(env, "UDP_ECHO_SERVER") != "" {
		port := envValue(env, "UDP_PORT")
		if port == "" {
			port = "8080"
		}
		probeNet, probeAddr, probePayload = "udp", ip+":"+port, []byte("podlet readiness probe")
	}
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
	pd := &pod{ns: d.Namespace, name: name, deployment: d.Name, slot: n, netns: netns, cmd: cmd, exited: exited, ip: ip,
		probeNet: probeNet, probeAddr: probeAddr, probePayload: probePayload}
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
// fields echo-basic reads; Secret and ConfigMap volumes are written under work-dir and paths in env
// values that point into their mount paths are rewritten.
func (p *podlet) containerEnv(ctx context.Context, d *appsv1.Deployment, name string) ([]string, error) {
	c := d.Spec.Template.Spec.Containers[0]
	mounts := map[string]string{} // mountPath -> local dir
	for _, vm := range c.VolumeMounts {
		for _, v := range d.Spec.Template.Spec.Volumes {
			if v.Name != vm.Name {
				continue
			}
			// The files of the volume: a Secret's data or a ConfigMap's (the CA bundle
			// echo-basic verifies client certificates with).
			var data map[string][]byte
			var items []corev1.KeyToPath
			switch {
			case v.Secret != nil:
				s, err := p.cs.CoreV1().Secrets(d.Namespace).Get(ctx, v.Secret.SecretName, metav1.GetOptions{})
				if err != nil {
					return nil, fmt.Errorf("secret volume %s: %v", v.Secret.SecretName, err)
				}
				data, items = s.Data, v.Secret.Items
			case v.ConfigMap != nil:
				cm, err := p.cs.CoreV1().ConfigMaps(d.Namespace).Get(ctx, v.ConfigMap.Name, metav1.GetOptions{})
				if err != nil {
					return nil, fmt.Errorf("configMap volume %s: %v", v.ConfigMap.Name, err)
				}
				data = map[string][]byte{}
				for k, val := range cm.Data {
					data[k] = []byte(val)
				}
				for k, val := range cm.BinaryData {
					data[k] = val
				}
				items = v.ConfigMap.Items
			default:
				continue
			}
			dir := filepath.Join(p.opts.workDir, "volumes", d.Namespace, name, v.Name)
			if err := os.MkdirAll(dir, 0o700); err != nil {
				return nil, err
			}
			if len(items) == 0 {
				for k := range data {
					items = append(items, corev1.KeyToPath{Key: k, Path: k})
				}
			}
			for _, it := range items {
				if err := os.WriteFile(filepath.Join(dir, it.Path), data[it.Key], 0o600); err != nil {
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

// envValue is the value of name in env (KEY=VALUE entries), or "".
func envValue(env []string, name string) string {
	for _, e := range env {
		if v, ok := strings.CutPrefix(e, name+"="); ok {
			return v
		}
	}
	return ""
}

// markReady marks the Pod Running and Ready once its process serves: echo-basic accepts
// connections on 3000 (HTTP, gRPC, TCP modes), a UDP echo server or the DNS stand-in
// answers a datagram.
func (p *podlet) markReady(ctx context.Context, pd *pod) {
	if pd.probeNet == "udp" {
		if !probeUDP(pd.probeAddr, pd.probePayload) {
			return
		}
	} else {
		conn, err := net.DialTimeout("tcp", pd.probeAddr, 100*time.Millisecond)
		if err != nil {
			return
		}
		conn.Close()
	}
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

func (p *podlet) logPath(ns, name string) string {
	return filepath.Join(p.opts.workDir, "logs", ns+"_"+name+".log")
}
