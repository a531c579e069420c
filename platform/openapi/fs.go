package openapi

import (
	"io/fs"
	"net/http"
)

func httpFS(f fs.FS) http.FileSystem { return http.FS(f) }
