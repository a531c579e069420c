package httpapi

import (
	"net/netip"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestClientIP: the peer is the client unless it is a trusted proxy; then
// X-Forwarded-For (over one or more lines) is walked from the right past
// the trusted proxies, and what a client wrote left of the first untrusted
// address is never believed; without trusted proxies the header is ignored;
// Forwarded's for= parameters are read the same way when it is the header.
func TestClientIP(t *testing.T) {
	t.Parallel()
	a := netip.MustParseAddr
	none, err := ParseProxies(nil, "")
	require.NoError(t, err)
	xff, err := ParseProxies([]string{"10.0.0.0/8", "192.0.2.7"}, "X-Forwarded-For")
	require.NoError(t, err)
	fwd, err := ParseProxies([]string{"10.0.0.0/8"}, "Forwarded")
	require.NoError(t, err)
	_, err = ParseProxies([]string{"10.0.0.0/33"}, "")
	require.Error(t, err)
	_, err = ParseProxies(nil, "X-Real-IP")
	require.Error(t, err)

	for _, c := range []struct {
		name  string
		p     Proxies
		peer  string
		lines []string
		want  string // "" is unknown
	}{
		{"no proxies: the header is ignored", none, "203.0.113.9", []string{"10.1.1.1"}, "203.0.113.9"},
		{"an untrusted peer's header is ignored", xff, "203.0.113.9", []string{"10.1.1.1"}, "203.0.113.9"},
		{"one trusted proxy", xff, "10.0.0.2", []string{"198.51.100.4"}, "198.51.100.4"},
		{"a spoofed leftmost entry is not believed", xff, "10.0.0.2", []string{"10.9.9.9, 198.51.100.4"}, "198.51.100.4"},
		{"two trusted proxies, skipped from the right", xff, "10.0.0.2", []string{"1.2.3.4, 198.51.100.4, 192.0.2.7"}, "198.51.100.4"},
		{"over several lines", xff, "10.0.0.2", []string{"1.2.3.4", "198.51.100.4, 10.3.3.3"}, "198.51.100.4"},
		{"every hop trusted: the leftmost", xff, "10.0.0.2", []string{"10.5.5.5, 10.6.6.6"}, "10.5.5.5"},
		{"no header: the proxy itself", xff, "10.0.0.2", nil, "10.0.0.2"},
		{"garbage ends the walk unknown", xff, "10.0.0.2", []string{"1.2.3.4, nonsense"}, ""},
		{"IPv6 with a port", xff, "10.0.0.2", []string{"[2001:db8::5]:443"}, "2001:db8::5"},
		{"Forwarded", fwd, "10.0.0.2", []string{`for=1.2.3.4, for="[2001:db8::9]:4711";proto=https, for=10.7.7.7`}, "2001:db8::9"},
		{"Forwarded unknown", fwd, "10.0.0.2", []string{"for=unknown"}, ""},
	} {
		got := c.p.client(a(c.peer), c.lines)
		if c.want == "" {
			require.False(t, got.IsValid(), "%s: %v", c.name, got)
			continue
		}
		require.Equal(t, a(c.want), got, c.name)
	}
}
