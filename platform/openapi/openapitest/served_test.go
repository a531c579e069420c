package openapitest_test

import (
	"io/fs"
	"net/http"
	"os"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"svc/cmd/svc/app/apptest"
	"svc/platform/openapi"
)

// The document and the interactive view, through the running service. Every
// exchange also goes through ValidateResponse (apptest does that).
func TestServed(t *testing.T) {
	t.Parallel()
	e := apptest.New(t)

	r := e.Do(apptest.Req{Method: "GET", Path: "/openapi.json", Key: "-"})
	require.Equal(t, http.StatusOK, r.Status)
	require.Equal(t, "application/json", r.Header.Get("Content-Type"))
	require.Equal(t, string(openapi.Spec), string(r.Body), "/openapi.json must be the committed file byte for byte")
	committed, err := os.ReadFile("../openapi.json")
	require.NoError(t, err)
	require.Equal(t, string(committed), string(r.Body))

	r = e.Do(apptest.Req{Method: "GET", Path: "/docs", Key: "-"})
	require.Equal(t, http.StatusOK, r.Status)
	require.Equal(t, "text/html; charset=utf-8", r.Header.Get("Content-Type"))
	page := string(r.Body)
	require.Contains(t, page, `src="/docs/third_party/swagger-ui/swagger-ui-bundle.js"`)
	require.Contains(t, page, `href="/docs/third_party/swagger-ui/swagger-ui.css"`)
	require.Contains(t, page, `url: "/openapi.json"`)
	require.Contains(t, page, `validatorUrl: null`, "the default validator badge would call an outside service")
	require.NotContains(t, page, "http:", "the page must load nothing from elsewhere")
	require.NotContains(t, page, "https:", "the page must load nothing from elsewhere")
	require.NotContains(t, page, `"//`, "the page must load nothing from elsewhere")

	for name, ct := range map[string]string{
		"swagger-ui-bundle.js":             "text/javascript; charset=utf-8",
		"swagger-ui.css":                   "text/css; charset=utf-8",
		"LICENSE":                          "text/plain; charset=utf-8",
		"NOTICE":                           "text/plain; charset=utf-8",
		"swagger-ui-bundle.js.LICENSE.txt": "text/plain; charset=utf-8",
	} {
		want, err := os.ReadFile("../docs/third_party/swagger-ui/" + name)
		require.NoError(t, err)
		r = e.Do(apptest.Req{Method: "GET", Path: "/docs/third_party/swagger-ui/" + name, Key: "-"})
		require.Equal(t, http.StatusOK, r.Status, name)
		require.Equal(t, ct, r.Header.Get("Content-Type"), name)
		require.True(t, string(want) == string(r.Body), "%s is not served byte for byte", name)
	}
	require.Contains(t, string(mustRead(t, "../docs/third_party/swagger-ui/LICENSE")), "Apache License")

	for _, path := range []string{"/docs/third_party/swagger-ui/README.md", "/docs/third_party/swagger-ui/nope.js", "/docs/index.html"} {
		r = e.Do(apptest.Req{Method: "GET", Path: path, Key: "-"})
		require.Equal(t, http.StatusNotFound, r.Status, path)
	}
}

// No file of the interactive view may point a browser at another host:
// the view must work with no internet.
func TestDocsNeedNoInternet(t *testing.T) {
	t.Parallel()
	err := fs.WalkDir(os.DirFS("../docs"), ".", func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(path, ".html") {
			return err
		}
		page := string(mustRead(t, "../docs/"+path))
		for _, tag := range []string{"<script src=", "<link "} {
			for _, part := range strings.Split(page, tag)[1:] {
				require.False(t, strings.Contains(strings.SplitN(part, ">", 2)[0], "//"), "%s loads %s%s", path, tag, part)
			}
		}
		return nil
	})
	require.NoError(t, err)
}

func mustRead(t *testing.T, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(name)
	require.NoError(t, err)
	return b
}
