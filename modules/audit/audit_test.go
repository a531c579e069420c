package audit_test

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"
	"github.com/uptrace/bun"

	"svc/cmd/svc/app/apptest"
	"svc/modules/apikey"
	"svc/modules/audit"
	"svc/modules/deposit"
	"svc/modules/event"
	"svc/platform/btcpay/btcpaysim"
	"svc/platform/config"
	"svc/platform/db"
	"svc/platform/dbtest"
)

// apptestActor mints the harness's two keys, the first entries of every
// trail.
const apptestActor = "cli:apptest"

// page reads GET /v1/admin/audit with query and requires a 200.
func page(t *testing.T, e *apptest.Env, query string) audit.ListView {
	t.Helper()
	r := e.AdminGet("/v1/admin/audit" + query)
	require.Equal(t, http.StatusOK, r.Status, string(r.Body))
	var v audit.ListView
	r.JSON(t, &v)
	require.NotNil(t, v.Entries)
	return v
}

// record writes one entry in its own transaction, as an action would.
func record(t *testing.T, e *apptest.Env, actor audit.Actor, action, target string, params any) audit.Entry {
	t.Helper()
	var x audit.Entry
	err := db.RunInTx(context.Background(), e.App.DB.Bun, func(ctx context.Context, tx bun.Tx) error {
		var err error
		x, err = audit.Record(ctx, tx, e.App.Clock.Now(), actor, action, target, params)
		return err
	})
	require.NoError(t, err)
	return x
}

func count(t *testing.T, e *apptest.Env, p audit.ListParams) int {
	t.Helper()
	p.Limit = audit.MaxListLimit
	list, next, err := audit.List(context.Background(), e.App.DB.Bun, p)
	require.NoError(t, err)
	require.Nil(t, next)
	return len(list)
}

// reviewed is a BTC deposit paid after its invoice expired: it waits in
// review for an operator.
func reviewed(t *testing.T) (*apptest.Env, string) {
	t.Helper()
	ctx := context.Background()
	sim, fake := apptest.StartProcessor(t, btcpaysim.Options{})
	e := apptest.New(t, apptest.WithClock(fake), apptest.WithProcessor(sim, "audit-test-secret"), apptest.WithConfig(func(c *config.Config) {
		c.Deposits.USDTPool = sim.TronPool()
	}))
	r := e.Post("/v1/deposits", map[string]any{"external_user_id": "ada", "asset": "BTC", "expected_amount": "50000"})
	require.Equal(t, http.StatusCreated, r.Status, string(r.Body))
	var v deposit.View
	r.JSON(t, &v)
	id := uuid.MustParse(v.DepositID)
	fake.Advance(61 * time.Minute)
	sim.Tick()
	require.NoError(t, e.App.Deposits.Reconcile(ctx, id))
	inv, ok := sim.InvoiceByOrderID(v.DepositID)
	require.True(t, ok)
	_, err := sim.Pay(inv.ID, btcpaysim.PayParams{Amounts: []string{"0.0005"}, Settled: true})
	require.NoError(t, err)
	require.NoError(t, e.App.Deposits.Reconcile(ctx, id))
	d, err := e.App.Deposits.Get(ctx, id)
	require.NoError(t, err)
	require.Equal(t, deposit.StatusReview, d.Status)
	return e, v.DepositID
}

// A resolution through the admin API is one entry by the admin key; a
// resolution refused (409) adds none.
func TestResolveIsAudited(t *testing.T) {
	t.Parallel()
	e, id := reviewed(t)
	path := "/v1/admin/deposits/" + id + "/resolve"

	r := e.AdminPost(path, map[string]any{"action": "credit"})
	require.Equal(t, http.StatusOK, r.Status, string(r.Body))
	got := page(t, e, "?action=deposit.resolve")
	require.Len(t, got.Entries, 1)
	x := got.Entries[0]
	require.Equal(t, e.AdminKeyID, x.Actor)
	require.Equal(t, "test operator", x.ActorLabel)
	require.Equal(t, audit.DepositResolve, x.Action)
	require.Equal(t, id, x.Target)
	require.JSONEq(t, `{"deposit_id":"`+id+`","action":"credit","payment_id":null}`, string(x.Detail))
	require.Regexp(t, `^[0-9a-f]{64}$`, x.RequestDigest)
	require.Equal(t, e.App.Clock.Now().UTC().Format("2006-01-02T15:04:05")+".000000+00:00", x.At)
	require.Nil(t, got.NextCursor)

	r = e.AdminPost(path, map[string]any{"action": "dismiss"})
	require.Equal(t, http.StatusConflict, r.Status, "no longer in review")
	require.Len(t, page(t, e, "?target="+id).Entries, 1, "the refused resolution left no entry")
}

// The entry is part of the action's transaction: rolled back, it is gone.
func TestRolledBackActionLeavesNoEntry(t *testing.T) {
	t.Parallel()
	e := apptest.New(t)
	ctx := context.Background()
	boom := errors.New("the action failed after recording")
	err := db.RunInTx(ctx, e.App.DB.Bun, func(ctx context.Context, tx bun.Tx) error {
		if _, err := audit.Record(ctx, tx, time.Now(), audit.CLI("ops"), audit.EventRedeliver, "evt_x", map[string]string{}); err != nil {
			return err
		}
		return boom
	})
	require.ErrorIs(t, err, boom)
	require.Zero(t, count(t, e, audit.ListParams{Target: "evt_x"}))

	_, err = audit.Record(ctx, e.App.DB.Bun, time.Now(), audit.Actor{}, audit.EventRedeliver, "evt_y", nil)
	require.ErrorContains(t, err, "no valid actor")
	_, err = audit.Record(ctx, e.App.DB.Bun, time.Now(), audit.CLI("ops"), audit.EventRedeliver, "evt_y", []string{"a"})
	require.ErrorContains(t, err, "JSON object")
	require.Zero(t, count(t, e, audit.ListParams{Target: "evt_y"}))
}

// The database itself refuses to change or delete the trail: the runtime
// role the service connects as has no privilege to, and even the schema
// owner is stopped by the trail's triggers.
func TestTrailIsAppendOnly(t *testing.T) {
	t.Parallel()
	e := apptest.New(t)
	ctx := context.Background()
	before := count(t, e, audit.ListParams{})
	require.Equal(t, 2, before, "the harness's two mints")
	owner, err := db.Open(ctx, dbtest.OwnerURL(e.App.Cfg.Database.URL), 2)
	require.NoError(t, err)
	defer owner.Close()
	for _, stmt := range []string{
		"UPDATE audit_log SET actor = 'cli:mallory'",
		"UPDATE audit_log SET detail = '{}' WHERE id = (SELECT max(id) FROM audit_log)",
		"DELETE FROM audit_log",
		"TRUNCATE audit_log",
	} {
		_, err := e.App.DB.Bun.ExecContext(ctx, stmt)
		require.ErrorContains(t, err, "permission denied", stmt)
		_, err = owner.Bun.ExecContext(ctx, stmt)
		require.ErrorContains(t, err, "append-only", stmt)
	}
	list, _, err := audit.List(ctx, e.App.DB.Bun, audit.ListParams{})
	require.NoError(t, err)
	require.Len(t, list, before)
	for _, x := range list {
		require.Equal(t, apptestActor, x.Actor)
	}
}

// Pages are newest first, keyset on id: no overlap, no gap, and an entry
// added while paging does not shift the pages after it.
func TestListPagesAndFilters(t *testing.T) {
	t.Parallel()
	e := apptest.New(t)
	ops := audit.CLI("ops")
	for i := range 9 {
		action := []string{audit.DepositResolve, audit.EventRedeliver, audit.AssetSetLimits}[i%3]
		record(t, e, ops, action, fmt.Sprintf("target-%d", i%2), map[string]int{"i": i})
	}
	all := page(t, e, "?limit=200")
	require.Len(t, all.Entries, 11, "nine and the harness's two mints")
	require.Nil(t, all.NextCursor)
	for i := 1; i < len(all.Entries); i++ {
		require.Greater(t, all.Entries[i-1].ID, all.Entries[i].ID, "newest first")
	}
	require.Equal(t, apikey.ScopeAdmin, scopeOf(t, all.Entries[len(all.Entries)-2]))

	var seen []int64
	query := "?limit=4"
	for n := 0; ; n++ {
		p := page(t, e, query)
		for _, x := range p.Entries {
			seen = append(seen, x.ID)
		}
		if n == 0 { // a new entry after the first page: newer than every cursor
			record(t, e, ops, audit.KeyRevoke, "key_late", map[string]string{"key_id": "key_late"})
		}
		if p.NextCursor == nil {
			require.Len(t, p.Entries, 3)
			break
		}
		require.Len(t, p.Entries, 4)
		require.Equal(t, p.Entries[3].ID, *p.NextCursor)
		query = fmt.Sprintf("?limit=4&cursor=%d", *p.NextCursor)
	}
	want := make([]int64, len(all.Entries))
	for i, x := range all.Entries {
		want[i] = x.ID
	}
	require.Equal(t, want, seen, "every entry once, in order")
	require.Len(t, page(t, e, "").Entries, 12, "default limit 50")

	for query, n := range map[string]int{
		"?target=target-0":                          5,
		"?target=target-1":                          4,
		"?action=event.redeliver":                   3,
		"?action=event.redeliver&target=target-1":   2,
		"?action=apikey.mint":                       2,
		"?action=apikey.revoke&target=key_late":     1,
		"?action=withdrawal.approve":                0,
		"?target=" + url.QueryEscape("no such one"): 0,
	} {
		require.Len(t, page(t, e, query).Entries, n, query)
	}
	p := page(t, e, "?target=target-0&limit=2")
	require.Len(t, p.Entries, 2)
	p = page(t, e, fmt.Sprintf("?target=target-0&limit=2&cursor=%d", *p.NextCursor))
	require.Len(t, p.Entries, 2)
	for _, x := range p.Entries {
		require.Equal(t, "target-0", x.Target)
	}

	for query, fields := range map[string][]string{
		"?limit=0":                 {"limit"},
		"?limit=201":               {"limit"},
		"?limit=abc":               {"limit"},
		"?limit=":                  {"limit"},
		"?cursor=0":                {"cursor"},
		"?cursor=-5":               {"cursor"},
		"?cursor=abc":              {"cursor"},
		"?cursor=":                 {"cursor"},
		"?action=Deposit.Resolve":  {"action"},
		"?action=":                 {"action"},
		"?target=":                 {"target"},
		"?target=a%00b":            {"target"},
		"?target=" + long(256):     {"target"},
		"?limit=0&cursor=x":        {"limit", "cursor"},
		"?cursor=1.5&action=a%20b": {"cursor", "action"},
	} {
		r := e.AdminGet("/v1/admin/audit" + query)
		require.Equal(t, http.StatusUnprocessableEntity, r.Status, query)
		var body struct {
			Detail []struct {
				Loc []any `json:"loc"`
			} `json:"detail"`
		}
		r.JSON(t, &body)
		var locs []string
		for _, d := range body.Detail {
			require.Equal(t, "query", d.Loc[0], query)
			locs = append(locs, d.Loc[1].(string))
		}
		require.ElementsMatch(t, fields, locs, "%s: every bad parameter at once", query)
	}
	require.Len(t, page(t, e, "?target="+long(255)).Entries, 0)

	require.Equal(t, http.StatusForbidden, e.Get("/v1/admin/audit").Status, "a readwrite key is not enough")
	require.Equal(t, http.StatusUnauthorized, e.Do(apptest.Req{Method: "GET", Path: "/v1/admin/audit", Key: "-"}).Status)
}

func long(n int) string { return strings.Repeat("k", n) }

func scopeOf(t *testing.T, x audit.View) apikey.Scope {
	t.Helper()
	var d struct {
		Scope apikey.Scope `json:"scope"`
	}
	require.NoError(t, json.Unmarshal(x.Detail, &d))
	return d.Scope
}

// Minting and revoking are recorded with their parameters and never the
// key or its hash.
func TestKeysAreAudited(t *testing.T) {
	t.Parallel()
	e := apptest.New(t)
	ctx := context.Background()
	alice := audit.CLI("alice")

	_, _, err := e.App.Keys.Mint(ctx, apikey.MintParams{Scope: apikey.ScopeReadWrite, Label: "nobody's"})
	require.ErrorContains(t, err, "audit actor", "every mint is audited")
	keys, err := e.App.Keys.List(ctx)
	require.NoError(t, err)
	require.Len(t, keys, 2, "no key without an entry")

	k, plain, err := e.App.Keys.Mint(ctx, apikey.MintParams{Scope: apikey.ScopeReadWrite, Label: "backend", ExpiresIn: 48 * time.Hour, Actor: alice})
	require.NoError(t, err)
	_, err = e.App.Keys.Revoke(ctx, k.ID, alice)
	require.NoError(t, err)
	_, err = e.App.Keys.Revoke(ctx, "key_nope", alice)
	require.ErrorIs(t, err, apikey.ErrNotFound)
	_, err = e.App.Keys.Revoke(ctx, k.ID, audit.Actor{})
	require.Error(t, err)

	r := e.AdminGet("/v1/admin/audit?target=" + k.ID)
	require.Equal(t, http.StatusOK, r.Status)
	var got audit.ListView
	r.JSON(t, &got)
	require.Len(t, got.Entries, 2)
	revoke, mint := got.Entries[0], got.Entries[1]
	require.Equal(t, audit.KeyRevoke, revoke.Action)
	require.Equal(t, "cli:alice", revoke.Actor)
	require.Equal(t, "alice", revoke.ActorLabel)
	require.JSONEq(t, `{"key_id":"`+k.ID+`"}`, string(revoke.Detail))
	require.Equal(t, audit.KeyMint, mint.Action)
	require.Equal(t, "cli:alice", mint.Actor)
	require.JSONEq(t, fmt.Sprintf(`{"scope":"readwrite","label":"backend","mode":"test","expires_at":%q}`,
		k.ExpiresAt.UTC().Format("2006-01-02T15:04:05.000000+00:00")), string(mint.Detail))
	require.Zero(t, count(t, e, audit.ListParams{Target: "key_nope"}))

	// The harness's keys too, and none of the secrets anywhere.
	r = e.AdminGet("/v1/admin/audit?action=apikey.mint")
	require.Len(t, r.Map(t)["entries"], 3)
	sum := sha256.Sum256([]byte(plain))
	// <prefix>_<mode>_<secret>: the secret is base64url and may hold "_" itself.
	secretOf := func(key string) string { return strings.SplitN(key, "_", 3)[2] }
	secret := secretOf(plain)
	for _, s := range []string{plain, secret, hex.EncodeToString(sum[:]), base64.StdEncoding.EncodeToString(sum[:]),
		e.Admin, e.RW, secretOf(e.Admin)} {
		require.NotContains(t, string(r.Body), s)
	}
}

// A redelivery through the admin API is one entry by the admin key, not
// repeated by a replay of the same request, and none for a refusal.
func TestRedeliverIsAudited(t *testing.T) {
	t.Parallel()
	e := apptest.New(t)
	ctx := context.Background()
	var ev event.Event
	user := "ada"
	require.NoError(t, db.RunInTx(ctx, e.App.DB.Bun, func(ctx context.Context, tx bun.Tx) error {
		var err error
		ev, err = e.App.Events.Emit(ctx, tx, event.DepositExpired, event.DepositExpiredData{
			DepositID: uuid.NewString(), ExternalUserID: &user, Asset: "BTC", Status: "expired"})
		return err
	}))
	path := "/v1/admin/events/" + ev.ID.String() + "/redeliver"
	r := e.AdminPost(path, nil)
	require.Equal(t, http.StatusConflict, r.Status, "pending: not redeliverable")
	// Ten failed attempts, in short.
	_, err := e.App.DB.Bun.ExecContext(ctx, "UPDATE outbound_events SET status = 'dead', attempts = 10, dead_at = now() WHERE id = ?", ev.ID)
	require.NoError(t, err)

	for range 2 {
		r = e.Do(apptest.Req{Method: "POST", Path: path, Key: e.Admin, Idem: "redeliver-once"})
		require.Equal(t, http.StatusOK, r.Status, string(r.Body))
	}
	got := page(t, e, "?action=event.redeliver")
	require.Len(t, got.Entries, 1)
	x := got.Entries[0]
	require.Equal(t, ev.PublicID(), x.Target)
	require.Equal(t, e.AdminKeyID, x.Actor)
	require.Equal(t, "test operator", x.ActorLabel)
	require.JSONEq(t, `{"event_id":"`+ev.PublicID()+`"}`, string(x.Detail))
	sum := sha256.Sum256([]byte(`{"event_id":"` + ev.PublicID() + `"}`))
	require.Equal(t, hex.EncodeToString(sum[:]), x.RequestDigest, "the digest of the parameters")
}
