package apptest

import (
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"
)

// RequireFieldNameRefused posts body to path and checks that the service
// refuses it for its key key, one that is not field but reads as it under
// case folding (the strict-key rule): a 422 with a single field error at
// ["body", key], of type field_name, naming field.
func (e *Env) RequireFieldNameRefused(t testing.TB, path, body, key, field string) {
	t.Helper()
	r := e.Post(path, body)
	require.Equal(t, http.StatusUnprocessableEntity, r.Status, "%s: %s", body, r.Body)
	fe := r.FieldErrors(t)
	require.Len(t, fe, 1, string(r.Body))
	require.Equal(t, []any{"body", key}, fe[0]["loc"], string(r.Body))
	require.Equal(t, "field_name", fe[0]["type"])
	require.Contains(t, fe[0]["msg"], "this field is "+field)
}
