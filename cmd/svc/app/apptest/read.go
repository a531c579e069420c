package apptest

import (
	"net/http"
	"net/url"
	"testing"
)

// Decode requires r's status to be status and decodes its body as a T
// (a resource's view).
func Decode[T any](t testing.TB, r *Response, status int) T {
	t.Helper()
	if r.Status != status {
		t.Fatalf("status %d, want %d: %s", r.Status, status, r.Body)
	}
	var v T
	r.JSON(t, &v)
	return v
}

// Balance is one asset's line of a balances answer.
type Balance struct{ Asset, Available, Held, Reserved, Total string }

// UserBalance reads a user's balance in one asset (zeros when the answer
// has no line for it).
func (e *Env) UserBalance(t testing.TB, user, code string) Balance {
	t.Helper()
	return e.balanceAt(t, "/v1/users/"+url.PathEscape(user)+"/balances", code)
}

// PlatformBalance reads a platform account's balance in one asset.
func (e *Env) PlatformBalance(t testing.TB, name, code string) Balance {
	t.Helper()
	return e.balanceAt(t, "/v1/platform-accounts/"+url.PathEscape(name)+"/balances", code)
}

func (e *Env) balanceAt(t testing.TB, path, code string) Balance {
	t.Helper()
	b := Decode[struct{ Balances []Balance }](t, e.Get(path), http.StatusOK)
	for _, x := range b.Balances {
		if x.Asset == code {
			return x
		}
	}
	return Balance{Asset: code, Available: "0", Held: "0", Reserved: "0", Total: "0"}
}
