package transfer_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"

	"svc/cmd/svc/app/apptest"
	"svc/modules/asset"
	"svc/modules/event/eventtest"
	"svc/modules/ledger"
	"svc/modules/transfer"
	"svc/modules/withdrawal"
	"svc/platform/money"
)

// env is the service on a fresh database, with BTC and USDT_TRC20
// enabled. Every scenario ends with its books checked (requireBooks).
type env struct {
	*apptest.Env
	fundMu sync.Mutex
	funded map[string]int64 // asset -> credited to users in the test
}

var fundSeq atomic.Int64

func setup(t testing.TB) *env {
	t.Helper()
	e := &env{Env: apptest.New(t), funded: map[string]int64{}}
	e.EnableAssets(asset.USDTTRC20)
	apptest.CheckAtEnd(t, e.requireBooks)
	return e
}

// fund credits units to a user's available balance, as a settled deposit
// would.
func (e *env) fund(t testing.TB, user, code string, units int64) {
	t.Helper()
	_, err := ledger.CreditDeposit(context.Background(), e.App.DB.Bun, code, ledger.UserHolder(user), units,
		fmt.Sprintf("test-funding:%s:%s:%d", user, code, fundSeq.Add(1)), "test funding")
	require.NoError(t, err)
	e.fundMu.Lock()
	e.funded[code] += units
	e.fundMu.Unlock()
}

// requireBooks: the ledger check (with the withdrawals' and the
// transfers' checks) is consistent; per asset, the available balances of
// every user and platform account add up to what was funded (a transfer
// only moves money between them); every event fits the published schema.
func (e *env) requireBooks(t testing.TB) {
	t.Helper()
	ctx := context.Background()
	rep, err := ledger.Check(ctx, e.App.DB.Bun, withdrawal.CheckHolds, transfer.CheckLegs)
	require.NoError(t, err)
	require.True(t, rep.LedgerConsistent, "ledger check: %+v", rep)
	var rows []struct {
		Asset string `bun:"asset"`
		Sum   int64  `bun:"sum"`
	}
	require.NoError(t, e.App.DB.Bun.NewRaw(`SELECT asset, sum(balance) AS sum FROM ledger_accounts
 WHERE kind IN ('user_available', 'platform_available') GROUP BY asset`).Scan(ctx, &rows))
	got := map[string]int64{}
	for _, r := range rows {
		got[r.Asset] = r.Sum
	}
	for code, units := range e.funded {
		require.Equal(t, units, got[code], "%s: the available balances add up to what was funded", code)
	}
	eventtest.RequireAllValid(t, e.App.DB.Bun)
}

// ref is an AccountRef of a user or, with a "platform:" prefix, of a
// platform account.
func ref(name string) transfer.AccountRef {
	if p, ok := strings.CutPrefix(name, "platform:"); ok {
		return transfer.AccountRef{PlatformAccount: p}
	}
	return transfer.AccountRef{ExternalUserID: name}
}

func holder(name string) ledger.Holder { return ref(name).Holder() }

// leg is one leg of a request body.
type leg struct {
	From   transfer.AccountRef `json:"from"`
	To     transfer.AccountRef `json:"to"`
	Asset  string              `json:"asset"`
	Amount string              `json:"amount"`
}

func l(from, to, code string, units int64) leg {
	return leg{From: ref(from), To: ref(to), Asset: code, Amount: fmt.Sprint(units)}
}

type body struct {
	Legs            []leg             `json:"legs"`
	Description     *string           `json:"description,omitempty"`
	Metadata        map[string]string `json:"metadata,omitempty"`
	ClientReference *string           `json:"client_reference,omitempty"`
}

func (e *env) post(b any) *apptest.Response {
	e.T.Helper()
	return e.Post("/v1/transfers", b)
}

// create posts a transfer and requires its 201.
func (e *env) create(t testing.TB, b body) transfer.View {
	t.Helper()
	r := e.post(b)
	require.Equal(t, http.StatusCreated, r.Status, string(r.Body))
	var v transfer.View
	r.JSON(t, &v)
	return v
}

func (e *env) get(t testing.TB, id string) transfer.View {
	t.Helper()
	r := e.Get("/v1/transfers/" + id)
	require.Equal(t, http.StatusOK, r.Status, string(r.Body))
	var v transfer.View
	r.JSON(t, &v)
	return v
}

// available is an account's available balance in smallest units, read
// through the ledger (a user's also through the API, which must agree).
func (e *env) available(t testing.TB, name, code string) int64 {
	t.Helper()
	h := holder(name)
	bs, err := ledger.HolderBalances(context.Background(), e.App.DB.Bun, h)
	require.NoError(t, err)
	var units int64
	for _, b := range bs {
		if b.Asset == code {
			units = b.Available
		}
	}
	if !h.Platform {
		r := e.Get("/v1/users/" + url.PathEscape(h.ID) + "/balances")
		require.Equal(t, http.StatusOK, r.Status, string(r.Body))
		var out struct {
			Balances []struct{ Asset, Available string }
		}
		r.JSON(t, &out)
		api := "0"
		for _, b := range out.Balances {
			if b.Asset == code {
				api = b.Available
			}
		}
		dec := map[string]int{asset.BTC: 8, asset.BTCLN: 8, asset.USDTTRC20: 6}[code]
		if api != "0" || units != 0 {
			require.Equal(t, money.Format(units, dec), api, "%s %s available through the API", name, code)
		}
	}
	return units
}

// history is a user's transaction history through the API.
type txn struct {
	Kind      string  `json:"kind"`
	Asset     string  `json:"asset"`
	Amount    string  `json:"amount"`
	Direction string  `json:"direction"`
	SourceRef *string `json:"source_ref"`
}

func (e *env) history(t testing.TB, name string) []txn {
	t.Helper()
	h := holder(name)
	path := "/v1/users/" + url.PathEscape(h.ID) + "/transactions?limit=100"
	if h.Platform {
		path = "/v1/platform-accounts/" + url.PathEscape(h.ID) + "/transactions?limit=100"
	}
	r := e.Get(path)
	require.Equal(t, http.StatusOK, r.Status, string(r.Body))
	var out struct {
		Transactions []txn `json:"transactions"`
	}
	r.JSON(t, &out)
	return out.Transactions
}

// events are the payloads of the transfer.completed events, oldest first.
func (e *env) events(t testing.TB) []map[string]any {
	t.Helper()
	var payloads []json.RawMessage
	require.NoError(t, e.App.DB.Bun.NewSelect().Table("outbound_events").Column("payload").
		Where("type = 'transfer.completed'").OrderExpr("created_at, id").Scan(context.Background(), &payloads))
	out := make([]map[string]any, len(payloads))
	for i, p := range payloads {
		eventtest.RequireValid(t, p)
		require.NoError(t, json.Unmarshal(p, &out[i]))
	}
	return out
}

func count(t testing.TB, e *env, query string, args ...any) int {
	t.Helper()
	var n int
	require.NoError(t, e.App.DB.Bun.NewRaw(query, args...).Scan(context.Background(), &n))
	return n
}

func ptr[T any](v T) *T { return &v }
