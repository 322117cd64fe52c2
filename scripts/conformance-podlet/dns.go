// The CoreDNS stand-in: the suite's UDPRoute test sends a DNS query through the Gateway
// to a Deployment running the CoreDNS image, which cannot run here. The podlet runs
// itself in the Pod's network namespace in this mode instead and answers the way the
// suite's Corefile configures CoreDNS for foo.bar.com (the `whoami` plugin: the client's
// address as an A/AAAA record and its port as SRV). Other names get SERVFAIL: the
// Corefile forwards them to public resolvers, and nothing here leaves the machine.

package main

import (
	"log"
	"net"
	"strings"
	"time"

	"github.com/miekg/dns"
)

// whoamiZone is the zone the suite's Corefile serves with `whoami`.
const whoamiZone = "foo.bar.com."

func serveDNSStandIn(addr string) {
	handler := dns.HandlerFunc(func(w dns.ResponseWriter, r *dns.Msg) {
		m := new(dns.Msg)
		m.SetReply(r)
		m.Authoritative = true
		if len(r.Question) != 1 || !dns.IsSubDomain(whoamiZone, strings.ToLower(r.Question[0].Name)) {
			m.Rcode = dns.RcodeServerFailure
			_ = w.WriteMsg(m)
			return
		}
		q := r.Question[0]
		ip, port := net.IPv4zero, 0
		if a, ok := w.RemoteAddr().(*net.UDPAddr); ok {
			ip, port = a.IP, a.Port
		}
		hdr := dns.RR_Header{Name: q.Name, Class: dns.ClassINET, Ttl: 0}
		if v4 := ip.To4(); v4 != nil {
			hdr.Rrtype = dns.TypeA
			m.Extra = append(m.Extra, &dns.A{Hdr: hdr, A: v4})
		} else {
			hdr.Rrtype = dns.TypeAAAA
			m.Extra = append(m.Extra, &dns.AAAA{Hdr: hdr, AAAA: ip})
		}
		srv := dns.RR_Header{Name: "_udp." + q.Name, Rrtype: dns.TypeSRV, Class: dns.ClassINET}
		m.Extra = append(m.Extra, &dns.SRV{Hdr: srv, Port: uint16(port), Target: "."})
		_ = w.WriteMsg(m)
	})
	log.Printf("CoreDNS stand-in listening on udp %s", addr)
	log.Fatal((&dns.Server{Addr: addr, Net: "udp", Handler: handler}).ListenAndServe())
}

// probeUDP sends one datagram to addr and reports whether anything answered within
// 100 ms (readiness of UDP backends: the echo server and the DNS stand-in).
func probeUDP(addr string, payload []byte) bool {
	conn, err := net.DialTimeout("udp", addr, 100*time.Millisecond)
	if err != nil {
		return false
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(100 * time.Millisecond))
	if _, err := conn.Write(payload); err != nil {
		return false
	}
	buf := make([]byte, 2048)
	n, err := conn.Read(buf)
	return err == nil && n > 0
}

// dnsProbe is a query for whoamiZone's A record.
func dnsProbe() []byte {
	m := new(dns.Msg)
	m.SetQuestion(whoamiZone, dns.TypeA)
	b, _ := m.Pack()
	return b
}
