package transfer_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"svc/modules/asset"
	"svc/platform/openapi/openapitest"
)

// patient is the HTTP client of the concurrent requests. 64 requests
// queue for the service's 20 database connections and for the payer's
// balance row, and under the race detector on a loaded machine one can
// wait longer than apptest's 30 s client timeout; a request that never
// ends still fails the test, later.
var patient = &http.Client{Timeout: 5 * time.Minute}

// postRaw sends one POST /v1/transfers from any goroutine (no t.Fatal) and
// checks the answer against openapi.json; it returns the status and body,
// or the transport error.
func (e *env) postRaw(t testing.TB, b any) (int, []byte, error) {
	raw, err := json.Marshal(b)
	if err != nil {
		return 0, nil, err
	}
	req, err := http.NewRequest(http.MethodPost, e.URL+"/v1/transfers", bytes.NewReader(raw))
	if err != nil {
		return 0, nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+e.RW)
	req.Header.Set("Idempotency-Key", "concurrent-"+uuid.NewString())
	resp, err := patient.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return 0, nil, err
	}
	if err := openapitest.CheckResponse(req, resp.StatusCode, resp.Header, body); err != nil {
		t.Errorf("openapi.json: POST /v1/transfers -> %d: %v\nbody: %s", resp.StatusCode, err, body)
	}
	return resp.StatusCode, body, nil
}

// run sends n requests, at most width at a time, and counts the answers by
// status (0: a transport error).
func (e *env) run(t testing.TB, n, width int, request func(i int) any) map[int]int {
	var mu sync.Mutex
	statuses := map[int]int{}
	jobs := make(chan int)
	var wg sync.WaitGroup
	for w := 0; w < width; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range jobs {
				status, body, err := e.postRaw(t, request(i))
				if err != nil {
					t.Errorf("request %d: %v", i, err)
				} else if status >= 500 || (status != http.StatusCreated && status != http.StatusPaymentRequired) {
					t.Errorf("request %d: %d %s", i, status, body)
				}
				mu.Lock()
				statuses[status]++
				mu.Unlock()
			}
		}()
	}
	for i := 0; i < n; i++ {
		jobs <- i
	}
	close(jobs)
	wg.Wait()
	return statuses
}

// TestConcurrentTransfersNeverOverspend: 1,000 transfers at once (64 at a
// time, through HTTP) from a user who can afford exactly 100 of them, to
// ten users and one platform account: exactly 100 succeed and 900 answer
// 402; a sampler reading the balances throughout, each time in one
// snapshot, never sees the payer negative, more spent than funded, or
// money that is neither with the payer nor with a payee; the books close.
func TestConcurrentTransfersNeverOverspend(t *testing.T) {
	t.Parallel()
	e := setup(t)
	const (
		transfers  = 1_000
		affordable = 100
		amount     = 1_000
		funded     = affordable * amount
	)
	e.fund(t, "payer", asset.BTC, funded)
	payee := func(i int) string {
		if i%11 == 10 {
			return "platform:revenue"
		}
		return fmt.Sprintf("payee-%d", i%11)
	}

	stop := make(chan struct{})
	var samples atomic.Int64
	sampled := make(chan error, 1)
	go func() {
		ctx := context.Background()
		for {
			select {
			case <-stop:
				sampled <- nil
				return
			default:
			}
			var payer, payees int64
			err := e.App.DB.Bun.NewRaw(`SELECT
  coalesce((SELECT balance FROM ledger_accounts WHERE asset = 'BTC' AND kind = 'user_available' AND owner = 'payer'), 0),
  coalesce((SELECT sum(balance) FROM ledger_accounts WHERE asset = 'BTC' AND owner <> 'payer'
             AND kind IN ('user_available', 'platform_available')), 0)`).Scan(ctx, &payer, &payees)
			switch {
			case err != nil:
				sampled <- err
				return
			case payer < 0 || funded-payer > funded || payer+payees != funded || payees%amount != 0:
				sampled <- fmt.Errorf("sample %d: payer %d, payees %d, funded %d", samples.Load(), payer, payees, funded)
				return
			}
			samples.Add(1)
		}
	}()

	start := time.Now()
	statuses := e.run(t, transfers, 64, func(i int) any {
		return body{Legs: []leg{l("payer", payee(i), asset.BTC, amount)}}
	})
	took := time.Since(start)
	close(stop)
	require.NoError(t, <-sampled)
	t.Logf("%d transfers, 64 at a time, in %s (%d balance samples): %v", transfers, took.Round(time.Millisecond), samples.Load(), statuses)

	require.Equal(t, map[int]int{http.StatusCreated: affordable, http.StatusPaymentRequired: transfers - affordable}, statuses)
	require.Greater(t, samples.Load(), int64(0))
	require.Equal(t, int64(0), e.available(t, "payer", asset.BTC))
	require.Equal(t, affordable, count(t, e, "SELECT count(*) FROM transfers"))
	require.Equal(t, affordable, count(t, e, "SELECT count(*) FROM ledger_entries WHERE kind = 'transfer'"))
	require.Len(t, e.events(t), affordable)
	var received int64
	for i := 0; i < 11; i++ {
		received += e.available(t, payee(i), asset.BTC)
	}
	require.Equal(t, int64(funded), received)
}

// TestOppositeTradesDoNotDeadlock: trades between the same pairs in both
// directions at once (A pays B in BTC and B pays A in USDT_TRC20, and the
// reverse, with the legs in either order): every one commits, none
// answers 5xx, and the database counts no deadlock.
func TestOppositeTradesDoNotDeadlock(t *testing.T) {
	t.Parallel()
	e := setup(t)
	users := []string{"ann", "ben", "cat", "dan"}
	for _, u := range users {
		e.fund(t, u, asset.BTC, 100_000_000)
		e.fund(t, u, asset.USDTTRC20, 100_000_000_000)
	}
	deadlocks := func() int64 {
		var n int64
		require.NoError(t, e.App.DB.Bun.NewRaw(`SELECT deadlocks FROM pg_stat_database WHERE datname = current_database()`).
			Scan(context.Background(), &n))
		return n
	}
	before := deadlocks()
	const trades = 400
	statuses := e.run(t, trades, 32, func(i int) any {
		a, b := users[(i/4)%2*2], users[(i/4)%2*2+1] // ann-ben, cat-dan
		if i%2 == 1 {
			a, b = b, a // the opposite trade
		}
		btc, usdt := l(a, b, asset.BTC, 1_000), l(b, a, asset.USDTTRC20, 600_000)
		if i%4 >= 2 {
			return body{Legs: []leg{usdt, btc}}
		}
		return body{Legs: []leg{btc, usdt}}
	})
	require.Equal(t, map[int]int{http.StatusCreated: trades}, statuses)
	// A deadlock would not show as a 5xx: db.RunInTx retries the
	// transaction. The database's own count is a second witness, as far
	// as the backends have reported it (they do when they go idle, at
	// most once a second).
	require.Equal(t, before, deadlocks(), "deadlocks counted by the database")
	require.Equal(t, trades*2, count(t, e, "SELECT count(*) FROM ledger_entries WHERE kind = 'transfer'"))
}

// TestOneLegTransfersDoNotDeadlock: a one-leg transfer takes
// LockAccounts too, which creates the accounts that do not exist yet in
// the one global order before it locks the rest. Posted alone, its leg
// would lock the payer's row first and create a new payee's after it,
// while a transfer of several legs creating that payee (whose name sorts
// first) takes them the other way: a deadlock. Raced here: one-leg
// transfers to new payees beside two-leg transfers to the same payees and
// the payer, both ways between users, and into a platform account; every
// one commits the fast way at its first attempt (a deadlock would send it
// the ordinary way, which retries), and the database counts no deadlock.
func TestOneLegTransfersDoNotDeadlock(t *testing.T) {
	t.Parallel()
	e := setup(t)
	users := []string{"ann", "ben", "cat"}
	for _, u := range users {
		e.fund(t, u, asset.BTC, 100_000_000)
	}
	// The platform account's shards exist before the race: two first
	// credits at once may deadlock once (ledger.Post), which is not what
	// this test looks at.
	statuses := e.run(t, 1, 1, func(int) any { return body{Legs: []leg{l("ann", "platform:pool", asset.BTC, 1)}} })
	require.Equal(t, map[int]int{http.StatusCreated: 1}, statuses)
	deadlocks := func() int64 {
		var n int64
		require.NoError(t, e.App.DB.Bun.NewRaw(`SELECT deadlocks FROM pg_stat_database WHERE datname = current_database()`).
			Scan(context.Background(), &n))
		return n
	}
	before, fast := deadlocks(), e.App.Transfers.FastCreated()
	const n = 300
	statuses = e.run(t, n, 32, func(i int) any {
		payee := fmt.Sprintf("a-new-%d", i/6) // sorts before every payer
		a, b := users[i%3], users[(i+1)%3]
		switch i % 6 {
		case 0, 3:
			return body{Legs: []leg{l("ann", payee, asset.BTC, 5)}}
		case 1, 4:
			return body{Legs: []leg{l(b, payee, asset.BTC, 5), l(b, "ann", asset.BTC, 5)}}
		case 2:
			return body{Legs: []leg{l(a, "platform:pool", asset.BTC, 7)}}
		default:
			return body{Legs: []leg{l(a, b, asset.BTC, 1_000)}}
		}
	})
	require.Equal(t, map[int]int{http.StatusCreated: n}, statuses)
	require.Equal(t, int64(n), e.App.Transfers.FastCreated()-fast, "created the fast way at the first attempt")
	require.Equal(t, before, deadlocks(), "deadlocks counted by the database")
}
