package egress

import "net/netip"

var internalNets = []struct {
	prefix netip.Prefix
	what   string
}{
	{netip.MustParsePrefix("0.0.0.0/8"), "a this-network address"},
	{netip.MustParsePrefix("10.0.0.0/8"), "a private address"},
	{netip.MustParsePrefix("100.64.0.0/10"), "a shared (carrier-grade NAT) address"},
	{netip.MustParsePrefix("127.0.0.0/8"), "a loopback address"},
	{netip.MustParsePrefix("169.254.0.0/16"), "a link-local address"},
	{netip.MustParsePrefix("172.16.0.0/12"), "a private address"},
	{netip.MustParsePrefix("192.0.0.0/24"), "an IETF protocol address"},
	{netip.MustParsePrefix("192.168.0.0/16"), "a private address"},
	{netip.MustParsePrefix("198.18.0.0/15"), "a benchmarking address"},
	{netip.MustParsePrefix("224.0.0.0/4"), "a multicast address"},
	{netip.MustParsePrefix("240.0.0.0/4"), "a reserved address"},
	{netip.MustParsePrefix("::/128"), "the unspecified address"},
	{netip.MustParsePrefix("::1/128"), "a loopback address"},
	{netip.MustParsePrefix("::/96"), "an IPv4-compatible address"},
	{netip.MustParsePrefix("fc00::/7"), "a unique local address"},
	{netip.MustParsePrefix("fe80::/10"), "a link-local address"},
	{netip.MustParsePrefix("fec0::/10"), "a site-local address"},
	{netip.MustParsePrefix("ff00::/8"), "a multicast address"},
}

// internal says whether a is an address a public name must not resolve
// to (loopback, private, link-local and the like), and what it is. IPv4
// embedded in IPv6 (mapped, NAT64, 6to4) is judged as the IPv4 address.
func internal(a netip.Addr) (bool, string) {
	a = a.Unmap()
	if a.Is6() {
		b := a.As16()
		switch {
		case netip.MustParsePrefix("64:ff9b::/96").Contains(a):
			return internal(netip.AddrFrom4([4]byte{b[12], b[13], b[14], b[15]}))
		case netip.MustParsePrefix("2002::/16").Contains(a):
			return internal(netip.AddrFrom4([4]byte{b[2], b[3], b[4], b[5]}))
		}
	}
	for _, n := range internalNets {
		if n.prefix.Contains(a) {
			return true, n.what
		}
	}
	return false, ""
}
