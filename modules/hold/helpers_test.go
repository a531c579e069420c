package hold_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"

	"svc/cmd/svc/app/apptest"
	"svc/modules/event/eventtest"
	"svc/modules/hold"
	"svc/modules/ledger"
	"svc/modules/withdrawal"
	"svc/platform/btcpay/btcpaysim"
	"svc/platform/clock"
)

const hookSecret = "test-processor-webhook-secret"

// env is the service on a fake clock, beside a simulated processor (for the
// withdrawals that meet holds). Every scenario ends with its books checked
// unless it forged them on purpose.
type env struct {
	*apptest.Env
	Clock *clock.Fake
	Svc   *hold.Service
}

type option func(*settings)

type settings struct {
	noBooks bool
	worker  bool
}

// forged: the scenario breaks the books on purpose; they are not checked
// at the end.
func forged() option { return func(s *settings) { s.noBooks = true } }

func withWorker() option { return func(s *settings) { s.worker = true } }

func setup(t testing.TB, opts ...option) *env {
	t.Helper()
	var s settings
	for _, o := range opts {
		o(&s)
	}
	sim, fake := apptest.StartProcessor(t, btcpaysim.Options{})
	aopts := []apptest.Option{apptest.WithClock(fake), apptest.WithProcessor(sim, hookSecret)}
	if s.worker {
		aopts = append(aopts, apptest.WithWorker())
	}
	e := &env{Env: apptest.New(t, aopts...), Clock: fake}
	e.Svc = e.App.Holds
	if !s.noBooks {
		apptest.CheckAtEnd(t, e.requireBooks)
	}
	return e
}

var fundSeq atomic.Int64

// fund credits units to a user's available balance, as a settled deposit
// would.
func (e *env) fund(t testing.TB, user, code string, units int64) {
	t.Helper()
	_, err := ledger.CreditDeposit(context.Background(), e.App.DB.Bun, code, ledger.UserHolder(user), units,
		fmt.Sprintf("test-funding:%s:%d", user, fundSeq.Add(1)), "test funding")
	require.NoError(t, err)
}

// requireBooks: the ledger is consistent, its withdrawal holds match the
// open withdrawals and its escrow the open holds, and every event fits the
// published schema.
func (e *env) requireBooks(t testing.TB) {
	t.Helper()
	ctx := context.Background()
	found, err := hold.CheckEscrow(ctx, e.App.DB.Bun)
	require.NoError(t, err)
	require.Empty(t, found, "escrow vs open holds")
	rep, err := ledger.Check(ctx, e.App.DB.Bun, withdrawal.CheckHolds, hold.CheckEscrow)
	require.NoError(t, err)
	require.True(t, rep.LedgerConsistent, "ledger check: %+v", rep)
	eventtest.RequireAllValid(t, e.App.DB.Bun)
}

// balance is one asset's balance of an account as the API shows it.
type balance = apptest.Balance

func user(id string) map[string]any     { return map[string]any{"external_user_id": id} }
func platform(id string) map[string]any { return map[string]any{"platform_account": id} }

// place posts a hold request.
func (e *env) place(body map[string]any) *apptest.Response {
	e.T.Helper()
	return e.Post("/v1/holds", body)
}

// holdOf places a hold of units from the account and requires a 201.
func (e *env) holdOf(t testing.TB, from map[string]any, code string, units int64, extra ...map[string]any) hold.View {
	t.Helper()
	body := map[string]any{"from": from, "asset": code, "amount": fmt.Sprint(units)}
	for _, x := range extra {
		for k, v := range x {
			body[k] = v
		}
	}
	r := e.place(body)
	require.Equal(t, http.StatusCreated, r.Status, string(r.Body))
	var v hold.View
	r.JSON(t, &v)
	return v
}

type leg struct {
	To     map[string]any `json:"to"`
	Amount string         `json:"amount"`
}

func (e *env) capture(id string, legs ...leg) *apptest.Response {
	e.T.Helper()
	return e.Post("/v1/holds/"+id+"/capture", map[string]any{"legs": legs})
}

func (e *env) void(id string) *apptest.Response {
	e.T.Helper()
	return e.Post("/v1/holds/"+id+"/void", nil)
}

func (e *env) get(t testing.TB, id string) hold.View {
	t.Helper()
	return view(t, e.Get("/v1/holds/"+id), http.StatusOK)
}

func view(t testing.TB, r *apptest.Response, status int) hold.View {
	t.Helper()
	return apptest.Decode[hold.View](t, r, status)
}

// detail decodes an error body's string detail.
func detail(t testing.TB, r *apptest.Response) string {
	t.Helper()
	var b struct {
		Detail json.RawMessage `json:"detail"`
	}
	r.JSON(t, &b)
	var s string
	require.NoError(t, json.Unmarshal(b.Detail, &s), "detail is a string: %s", r.Body)
	return s
}

// events returns the data of every event of type typ, oldest first.
func (e *env) events(t testing.TB, typ string) []map[string]any {
	t.Helper()
	var payloads []json.RawMessage
	require.NoError(t, e.App.DB.Bun.NewSelect().Table("outbound_events").Column("payload").
		Where("type = ?", typ).OrderExpr("created_at, id").Scan(context.Background(), &payloads))
	out := make([]map[string]any, 0, len(payloads))
	for _, p := range payloads {
		var ev struct {
			Data map[string]any `json:"data"`
		}
		require.NoError(t, json.Unmarshal(p, &ev))
		out = append(out, ev.Data)
	}
	return out
}

// asMap is a response's body decoded generically, for comparing with an
// event's data.
func asMap(t testing.TB, v any) map[string]any {
	t.Helper()
	b, err := json.Marshal(v)
	require.NoError(t, err)
	var m map[string]any
	require.NoError(t, json.Unmarshal(b, &m))
	return m
}
