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

func parsePattern(s string) (pattern, error) {
	var p pattern
	host := s
	switch {
	case strings.HasPrefix(s, "["):
		end := strings.Index(s, "]")
		if end < 0 {
			return p, fmt.Errorf("an unclosed [")
		}
		host = s[1:end]
		if rest := s[end+1:]; rest != "" {
			port, ok := strings.CutPrefix(rest, ":")
			if !ok {
				return p, fmt.Errorf("after ] comes :PORT or nothing")
			}
			if err := p.setPort(port); err != nil {
				return p, err
			}
		}
	case strings.Count(s, ":") == 1:
		h, port, _ := strings.Cut(s, ":")
		if err := p.setPort(port); err != nil {
			return p, err
		}
		host = h
	}
	if pf, err := netip.ParsePrefix(host); err == nil {
		if pf != pf.Masked() {
			return p, fmt.Errorf("prefix %s has bits set past its length (write %s)", pf, pf.Masked())
		}
		p.prefix = pf
		return p, nil
	}
	if ip, err := netip.ParseAddr(host); err == nil {
		if ip.Zone() != "" {
			return p, fmt.Errorf("an address with a zone")
		}
		p.prefix = netip.PrefixFrom(ip, ip.BitLen())
		return p, nil
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

func dnsName(s string) bool {
	if s == "" || len(s) > 253 {
		return false
	}
	for _, l := range strings.Split(s, ".") {
		if l == "" || len(l) > 63 || l[0] == '-' || l[len(l)-1] == '-' {
			return false
		}
		for _, c := range l {
			if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-') {
				return false
			}
		}
	}
	return true
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
