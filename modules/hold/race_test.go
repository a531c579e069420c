package hold_test

import (
	"context"
	"fmt"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"svc/modules/hold"
)

// TestCaptureVoidAndExpiryRace fires a capture, a void and the expiry pass
// at one hold at once, many times: exactly one wins each time, the others
// answer 409 naming the winner's status (the pass skips the hold), and the
// books close.
func TestCaptureVoidAndExpiryRace(t *testing.T) {
	t.Parallel()
	e := setup(t)
	const rounds = 24
	e.fund(t, "racer", "BTC", rounds*1_000)
	wins := map[hold.Status]int{}
	for i := range rounds {
		h := e.holdOf(t, user("racer"), "BTC", 1_000, map[string]any{"expires_in": 1})
		e.Clock.Advance(2 * time.Second) // due, so the pass competes too
		var (
			wg                sync.WaitGroup
			capStatus, voidSt int
			capDetail, voidDt string
			expired           int
			expErr            error
		)
		wg.Add(3)
		go func() {
			defer wg.Done()
			r := e.capture(h.HoldID, leg{To: user(fmt.Sprintf("seller-%d", i)), Amount: "600"})
			capStatus = r.Status
			if r.Status != http.StatusOK {
				capDetail = detail(t, r)
			}
		}()
		go func() {
			defer wg.Done()
			r := e.void(h.HoldID)
			voidSt = r.Status
			if r.Status != http.StatusOK {
				voidDt = detail(t, r)
			}
		}()
		go func() {
			defer wg.Done()
			expired, expErr = e.Svc.Expire(context.Background())
		}()
		wg.Wait()
		require.NoError(t, expErr)
		final := e.get(t, h.HoldID)
		winners := 0
		if capStatus == http.StatusOK {
			winners++
			require.Equal(t, hold.StatusCaptured, final.Status)
		} else {
			require.Equal(t, http.StatusConflict, capStatus)
			require.Contains(t, capDetail, string(final.Status))
		}
		if voidSt == http.StatusOK {
			winners++
			require.Equal(t, hold.StatusVoided, final.Status)
		} else {
			require.Equal(t, http.StatusConflict, voidSt)
			require.Contains(t, voidDt, string(final.Status))
		}
		if expired == 1 {
			winners++
			require.Equal(t, hold.StatusExpired, final.Status)
		} else {
			require.Zero(t, expired)
		}
		require.Equal(t, 1, winners, "round %d: exactly one wins (%s)", i, final.Status)
		wins[final.Status]++
	}
	t.Logf("winners over %d rounds: %v", rounds, wins)
	require.Len(t, e.events(t, "hold.captured"), wins[hold.StatusCaptured])
	require.Len(t, e.events(t, "hold.voided"), wins[hold.StatusVoided])
	require.Len(t, e.events(t, "hold.expired"), wins[hold.StatusExpired])
	b := e.UserBalance(t, "racer", "BTC")
	require.Equal(t, "0.00000000", b.Reserved)
	require.Equal(t, fmt.Sprintf("0.%08d", rounds*1_000-wins[hold.StatusCaptured]*600), b.Available)
}
