// Package openapi holds the service's contract, openapi.json (OpenAPI 3.1;
// its interface version is info.version, VersionOf), embedded and served byte for byte at
// /openapi.json, with an interactive view at /docs that needs no internet:
// the page and the Swagger UI files it loads are embedded too.
//
// openapi.json is written by hand and is the contract: code follows it.
// The tests in openapitest and cmd/svc/app check that every route is in it,
// that every operation in it is routed (or listed as not yet implemented),
// and that every response of the API tests matches it.
package openapi

import (
	"embed"
	"encoding/json"
	"fmt"

	"github.com/gofiber/fiber/v2"
)

// Spec is the committed document, byte for byte.
//
//go:embed openapi.json
var Spec []byte

//go:embed docs
var docsFS embed.FS

// VersionOf returns info.version of doc, an OpenAPI document (JSON): the
// interface version it describes.
func VersionOf(doc []byte) (string, error) {
	var d struct {
		Info struct {
			Version string `json:"version"`
		} `json:"info"`
	}
	if err := json.Unmarshal(doc, &d); err != nil {
		return "", fmt.Errorf("openapi: %w", err)
	}
	if d.Info.Version == "" {
		return "", fmt.Errorf("openapi: the document has no info.version")
	}
	return d.Info.Version, nil
}

// Routes registers /openapi.json, /docs and the files /docs loads.
func Routes(r fiber.Router) {
	r.Get("/openapi.json", func(c *fiber.Ctx) error {
		c.Set(fiber.HeaderContentType, fiber.MIMEApplicationJSON)
		return c.Send(Spec)
	})
	r.Get("/docs", func(c *fiber.Ctx) error {
		return sendDoc(c, "index.html", fiber.MIMETextHTMLCharsetUTF8)
	})
	r.Get("/docs/third_party/swagger-ui/:file", serveSwaggerUI)
}
