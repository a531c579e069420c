// Package openapi holds the service's contract, openapi.json (OpenAPI 3.1,
// interface version 0.2.0), embedded and served byte for byte at
// /openapi.json, with an interactive view at /docs that needs no internet.
package openapi

import (
	"embed"
	"io/fs"

	"github.com/gofiber/fiber/v2"
	"github.com/gofiber/fiber/v2/middleware/filesystem"
)

// Spec is the committed document, byte for byte.
//
//go:embed openapi.json
var Spec []byte

//go:embed docs
var docsFS embed.FS

// Routes registers /openapi.json and /docs.
func Routes(r fiber.Router) {
	r.Get("/openapi.json", func(c *fiber.Ctx) error {
		c.Set(fiber.HeaderContentType, fiber.MIMEApplicationJSON)
		return c.Send(Spec)
	})
	sub, _ := fs.Sub(docsFS, "docs")
	r.Get("/docs", func(c *fiber.Ctx) error {
		b, err := fs.ReadFile(sub, "index.html")
		if err != nil {
			return err
		}
		c.Set(fiber.HeaderContentType, fiber.MIMETextHTMLCharsetUTF8)
		return c.Send(b)
	})
	r.Use("/docs/", filesystem.New(filesystem.Config{Root: httpFS(sub)}))
}
