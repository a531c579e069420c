package httpapi

import (
	"fmt"
	"net"
	"net/netip"
	"strings"

	"github.com/gofiber/fiber/v2"
)

// Proxies are the reverse proxies whose word on the client's address is
// believed (TRUSTED_PROXIES), and the header they give it in.
//
// The client's address is the TCP peer's, unless the peer is a trusted
// proxy: then the header's list of addresses (X-Forwarded-For: client,
// proxy1, proxy2; or Forwarded's for= parameters) is walked from the
// right, each proxy having appended the address it received the request
// from, skipping the trusted proxies; the first address that is not one is
// the client's. What lies left of it was written by the client, or by a
// proxy nobody vouches for, and is never believed. An entry that is not an
// address (Forwarded's "unknown", an obfuscated name, garbage) ends the
// walk with no known address. The zero Proxies trusts no one: every header
// is ignored.
type Proxies struct {
	nets      []netip.Prefix
	forwarded bool // Forwarded (RFC 7239) instead of X-Forwarded-For
}

// ParseProxies reads a list of trusted proxies, each a CIDR or an address,
// and the header they set: "X-Forwarded-For" (or "") or "Forwarded".
func ParseProxies(list []string, header string) (Proxies, error) {
	var p Proxies
	switch {
	case header == "" || strings.EqualFold(header, fiber.HeaderXForwardedFor):
	case strings.EqualFold(header, "Forwarded"):
		p.forwarded = true
	default:
		return Proxies{}, fmt.Errorf("the proxies' header must be X-Forwarded-For or Forwarded, not %q", header)
	}
	for _, raw := range list {
		raw = strings.TrimSpace(raw)
		if raw == "" {
			continue
		}
		n, err := ParseNetwork(raw)
		if err != nil {
			return Proxies{}, fmt.Errorf("trusted proxy: %w", err)
		}
		p.nets = append(p.nets, n.Masked())
	}
	return p, nil
}

// ParseNetwork reads a network: a CIDR ("10.0.0.0/8", "2001:db8::/32"), or
// an address, which is the network of that address alone ("203.0.113.9"
// is 203.0.113.9/32); an IPv4-mapped IPv6 address is its IPv4 address. Host
// bits are kept: Masked drops them.
func ParseNetwork(s string) (netip.Prefix, error) {
	s = strings.TrimSpace(s)
	if n, err := netip.ParsePrefix(s); err == nil {
		return n, nil
	}
	a, err := netip.ParseAddr(s)
	if err != nil || a.Zone() != "" {
		return netip.Prefix{}, fmt.Errorf("%q is not a CIDR (10.0.0.0/8, 2001:db8::/32) or an IP address", s)
	}
	a = a.Unmap()
	return netip.PrefixFrom(a, a.BitLen()), nil
}

// trusted reports whether a is a trusted proxy.
func (p Proxies) trusted(a netip.Addr) bool {
	for _, n := range p.nets {
		if n.Contains(a) {
			return true
		}
	}
	return false
}

// ClientIP is the address of c's client (see Proxies), or the zero Addr
// when it is not known.
func (p Proxies) ClientIP(c *fiber.Ctx) netip.Addr {
	peer, _ := netip.AddrFromSlice(c.Context().RemoteIP())
	name := fiber.HeaderXForwardedFor
	if p.forwarded {
		name = "Forwarded"
	}
	var lines []string
	for _, v := range c.Request().Header.PeekAll(name) {
		lines = append(lines, string(v))
	}
	return p.client(peer.Unmap(), lines)
}

// ClientIPOf is ClientIP for a net/http request's RemoteAddr and header.
func (p Proxies) ClientIPOf(remoteAddr string, values func(name string) []string) netip.Addr {
	peer, err := netip.ParseAddrPort(remoteAddr)
	if err != nil {
		return netip.Addr{}
	}
	name := "X-Forwarded-For"
	if p.forwarded {
		name = "Forwarded"
	}
	return p.client(peer.Addr().Unmap(), values(name))
}

// client walks the header's lines (in the order received) from the right,
// starting at peer.
func (p Proxies) client(peer netip.Addr, lines []string) netip.Addr {
	if !peer.IsValid() || !p.trusted(peer) {
		return peer
	}
	var hops []string
	for _, l := range lines {
		for _, e := range strings.Split(l, ",") {
			if e = strings.TrimSpace(e); e != "" {
				hops = append(hops, e)
			}
		}
	}
	addr := peer
	for i := len(hops) - 1; i >= 0; i-- {
		next, ok := p.hop(hops[i])
		if !ok {
			return netip.Addr{}
		}
		addr = next
		if !p.trusted(addr) {
			return addr
		}
	}
	return addr // every hop a trusted proxy: the leftmost
}

// hop reads one entry of the header: an address (X-Forwarded-For), or the
// for= parameter of one forwarded-element (Forwarded: for=192.0.2.1;proto=https,
// for="[2001:db8::1]:4711").
func (p Proxies) hop(e string) (netip.Addr, bool) {
	if p.forwarded {
		v := ""
		for _, pair := range strings.Split(e, ";") {
			k, val, ok := strings.Cut(strings.TrimSpace(pair), "=")
			if ok && strings.EqualFold(strings.TrimSpace(k), "for") {
				v = strings.Trim(strings.TrimSpace(val), `"`)
			}
		}
		e = v
	}
	if h, _, err := net.SplitHostPort(e); err == nil {
		e = h
	}
	a, err := netip.ParseAddr(strings.TrimSuffix(strings.TrimPrefix(e, "["), "]"))
	if err != nil || a.Zone() != "" {
		return netip.Addr{}, false
	}
	return a.Unmap(), true
}
