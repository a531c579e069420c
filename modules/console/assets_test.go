package console

import (
	"crypto/sha256"
	"encoding/hex"
	"io/fs"
	"testing"

	"github.com/stretchr/testify/require"
)

// htmxSHA256 is the SHA-256 of dist/htmx.min.js in the npm package
// htmx.org 2.0.11 (its tarball's integrity is
// sha512-Thx/WtpeOQqSrqBCw/A1cwGJGg4UrVa3+sW0GmrM3p4gJgO89ecH4qtbnyzDDWFvBTqjnIMCgELTNt636dtamA==).
const htmxSHA256 = "d6fdc75f204e6bdefa99b69bf1e6d4ac69b8a364f77929f45c13476b4000f717"

// TestEmbeddedHTMXIsThePinnedRelease: the embedded htmx is byte for byte
// the pinned release, under a name that carries its version, and the
// layout loads that name.
func TestEmbeddedHTMXIsThePinnedRelease(t *testing.T) {
	b, err := fs.ReadFile(assetFS, "assets/"+HTMX)
	require.NoError(t, err)
	sum := sha256.Sum256(b)
	require.Equal(t, htmxSHA256, hex.EncodeToString(sum[:]), "assets/%s is not htmx.org 2.0.11's dist/htmx.min.js", HTMX)
	require.Equal(t, "htmx-2.0.11.min.js", HTMX)
	layout, err := fs.ReadFile(templateFS, "templates/layout.html")
	require.NoError(t, err)
	require.Contains(t, string(layout), `src="/assets/{{htmx}}"`)
}
