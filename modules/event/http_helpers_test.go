package event_test

import (
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"

	"svc/cmd/svc/app/apptest"
)

// okBody requires a 200 and decodes the answer's body.
func okBody[T any](t *testing.T, r *apptest.Response) T {
	t.Helper()
	require.Equal(t, http.StatusOK, r.Status, string(r.Body))
	var v T
	r.JSON(t, &v)
	return v
}
