// The kubelet's log API, for the Pods this podlet runs.

package main

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"fmt"
	"log"
	"math/big"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

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
