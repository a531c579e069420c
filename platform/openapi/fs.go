package openapi

import (
	"io/fs"

	"github.com/gofiber/fiber/v2"

	"svc/platform/fault"
	"svc/platform/httpapi"
)

// swaggerUIFiles are the vendored files /docs may load, with their content
// types. Only these are served: an explicit list keeps the route documented
// exactly (openapi.json enumerates the same names) and serves nothing else
// that happens to sit in the folder.
var swaggerUIFiles = map[string]string{
	"swagger-ui-bundle.js":             "text/javascript; charset=utf-8",
	"swagger-ui.css":                   "text/css; charset=utf-8",
	"LICENSE":                          fiber.MIMETextPlainCharsetUTF8,
	"NOTICE":                           fiber.MIMETextPlainCharsetUTF8,
	"swagger-ui-bundle.js.LICENSE.txt": fiber.MIMETextPlainCharsetUTF8,
}

var errNoSuchFile = fault.New(fault.NotFound, "not found")

func serveSwaggerUI(c *fiber.Ctx) error {
	name := httpapi.Param(c, "file")
	ct, ok := swaggerUIFiles[name]
	if !ok {
		return errNoSuchFile
	}
	return sendDoc(c, "third_party/swagger-ui/"+name, ct)
}

// sendDoc sends one embedded file of docs/.
func sendDoc(c *fiber.Ctx, name, contentType string) error {
	b, err := fs.ReadFile(docsFS, "docs/"+name)
	if err != nil {
		return err // embedded at build time: a missing file is a bug, so 500
	}
	c.Set(fiber.HeaderContentType, contentType)
	return c.Send(b)
}
