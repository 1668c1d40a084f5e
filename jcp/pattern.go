package jcp

import (
	"fmt"
	"net/netip"
	"strconv"
	"strings"
)

// pattern is a network destination pattern of the hosts caveat (§3.1).
type pattern struct {
	name   string       // a DNS name, or the suffix after "*."
	wild   bool         // "*." + name: any name below it, not itself
	prefix netip.Prefix // an IP (full length) or a prefix
	port   int          // 0: any
}

// parsePattern reads a host pattern in its one spelling (§3.1): a
// lower-case DNS name, "*." and one, an IP address or prefix in its
// canonical text (host bits clear, no zone, no IPv4-mapped IPv6), each
// optionally with ":PORT"; an IPv6 address or prefix with a port is
// bracketed ("[2001:db8::/32]:443"), and only then.
func parsePattern(s string) (pattern, error) {
	var p pattern
	host := s
	bracketed := strings.HasPrefix(s, "[")
	switch {
	case bracketed:
		end := strings.Index(s, "]")
		if end < 0 {
			return p, fmt.Errorf("an unclosed [")
		}
		host = s[1:end]
		port, ok := strings.CutPrefix(s[end+1:], ":")
		if !ok {
			return p, fmt.Errorf("brackets hold an IPv6 address with a port: [ADDR]:PORT")
		}
		if err := p.setPort(port); err != nil {
			return p, err
		}
	case strings.Count(s, ":") == 1:
		h, port, _ := strings.Cut(s, ":")
		if err := p.setPort(port); err != nil {
			return p, err
		}
		host = h
	}
	if strings.Contains(host, "/") {
		pf, err := netip.ParsePrefix(host)
		switch {
		case err != nil:
			return p, fmt.Errorf("not an IP prefix")
		case pf != pf.Masked():
			return p, fmt.Errorf("prefix %s has bits set past its length (write %s)", pf, pf.Masked())
		}
		p.prefix = pf
	} else if ip, err := netip.ParseAddr(host); err == nil {
		p.prefix = netip.PrefixFrom(ip, ip.BitLen())
	}
	if p.isIP() {
		a := p.prefix.Addr()
		switch {
		case a.Zone() != "":
			return p, fmt.Errorf("an address with a zone")
		case a.Is4In6():
			return p, fmt.Errorf("an IPv4-mapped IPv6 address: write the IPv4 address")
		case bracketed && !a.Is6():
			return p, fmt.Errorf("only an IPv6 address is bracketed")
		}
		canon := a.String()
		if strings.Contains(host, "/") {
			canon = p.prefix.String()
		}
		if canon != host {
			return p, fmt.Errorf("not the canonical text of its address (write %s)", canon)
		}
		return p, nil
	}
	if bracketed {
		return p, fmt.Errorf("only an IPv6 address is bracketed")
	}
	name, wild := strings.CutPrefix(host, "*.")
	if !dnsName(name) {
		return p, fmt.Errorf("not a lower-case DNS name, *.NAME, an IP address or a prefix")
	}
	p.name, p.wild = name, wild
	return p, nil
}

func (p *pattern) setPort(s string) error {
	n, err := strconv.Atoi(s)
	if err != nil || n < 1 || n > 65535 || strconv.Itoa(n) != s {
		return fmt.Errorf("port %q is not 1 to 65535", s)
	}
	p.port = n
	return nil
}

// dnsName: lower-case LDH labels (A-labels for international names) of
// 1 to 63 bytes, not starting or ending with '-', 253 bytes in all, no
// trailing dot, and a last label not all digits (so that no name reads as
// an IPv4 address).
func dnsName(s string) bool {
	if s == "" || len(s) > 253 {
		return false
	}
	labels := strings.Split(s, ".")
	for _, l := range labels {
		if l == "" || len(l) > 63 || l[0] == '-' || l[len(l)-1] == '-' {
			return false
		}
		for _, c := range l {
			if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-') {
				return false
			}
		}
	}
	return strings.Trim(labels[len(labels)-1], "0123456789") != ""
}

func (p pattern) isIP() bool { return p.prefix.IsValid() }

// coversHost says whether p covers a destination host and port (port 0:
// any port, which only a port-less pattern covers).
func (p pattern) coversHost(host string, port int) bool {
	if p.port != 0 && p.port != port {
		return false
	}
	if ip, err := netip.ParseAddr(host); err == nil {
		return p.isIP() && p.prefix.Contains(ip.Unmap())
	}
	if p.isIP() {
		return false
	}
	if p.wild {
		return strings.HasSuffix(host, "."+p.name)
	}
	return host == p.name
}

// coversPattern says whether p covers every destination c does.
func (p pattern) coversPattern(c pattern) bool {
	if p.port != 0 && p.port != c.port {
		return false
	}
	switch {
	case p.isIP() != c.isIP():
		return false
	case p.isIP():
		return c.prefix.Bits() >= p.prefix.Bits() && p.prefix.Contains(c.prefix.Addr())
	case !p.wild:
		return !c.wild && c.name == p.name
	default:
		return strings.HasSuffix(c.name, "."+p.name) || c.wild && c.name == p.name
	}
}

// coveredBy says whether some pattern of ps covers c (ps are valid).
func coveredBy(ps []string, c pattern) bool {
	for _, s := range ps {
		if p, err := parsePattern(s); err == nil && p.coversPattern(c) {
			return true
		}
	}
	return false
}

// HostAllowed says whether the hosts caveat hs (nil: no caveat) covers a
// destination host (a DNS name or an IP) and port.
func HostAllowed(hs []string, host string, port int) bool {
	if hs == nil {
		return true
	}
	for _, s := range hs {
		if p, err := parsePattern(s); err == nil && p.coversHost(host, port) {
			return true
		}
	}
	return false
}
