package withdrawal_test

import (
	"fmt"
	"net/http"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"svc/cmd/svc/app/apptest"
	"svc/modules/asset"
	"svc/modules/withdrawal"
	"svc/platform/chain"
)

// sharedPipeline posts bodies in parallel, each with a key of its own,
// while every pipeline slot is taken (sharedRequests), and returns the
// answers in the order of bodies.
func (e *env) sharedPipeline(t *testing.T, bodies []createBody) []*apptest.Response {
	t.Helper()
	reqs := make([]apptest.Req, len(bodies))
	for i, b := range bodies {
		reqs[i] = apptestReq(b, fmt.Sprint("shared-", t.Name(), "-", i))
	}
	return e.sharedRequests(reqs)
}

// sharedRequests sends reqs in parallel while every pipeline slot is
// taken, so that all of them wait, then sends the ones waiting in one
// shared pipeline, and returns the answers in the order of reqs.
func (e *env) sharedRequests(reqs []apptest.Req) []*apptest.Response {
	flush := withdrawal.HoldAutoPipelines(e.Svc)
	answers := make([]*apptest.Response, len(reqs))
	var wg sync.WaitGroup
	for i, req := range reqs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			answers[i] = e.Do(req)
		}()
	}
	flush(len(reqs))
	wg.Wait()
	return answers
}

// warmCopy creates one withdrawal the ordinary way, so that the next ones
// may take the one-round-trip path.
func (e *env) warmCopy(t *testing.T) {
	t.Helper()
	e.fund(t, "warm", asset.BTC, 100_000)
	e.create(t, "warm", asset.BTC, 10_000, p2wpkh(t, chain.Regtest, "warm"))
}

// TestSharedPipelineCreatesEach: creations that waited for a pipeline are
// written together, each with its own answer, row, hold and volume.
func TestSharedPipelineCreatesEach(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.warmCopy(t)
	var bodies []createBody
	for i := range 6 {
		user := fmt.Sprint("s-", 5-i) // sent in another order than the users'
		e.fund(t, user, asset.BTC, 100_000)
		bodies = append(bodies, createBody{ExternalUserID: user, Asset: asset.BTC, Amount: fmt.Sprint(20_000 + i),
			Destination: p2wpkh(t, chain.Regtest, user)})
	}
	// One user twice: two holds on the same accounts in one transaction.
	bodies = append(bodies, createBody{ExternalUserID: "s-3", Asset: asset.BTC, Amount: "11000",
		Destination: p2wpkh(t, chain.Regtest, "s-3-again")})
	for i, r := range e.sharedPipeline(t, bodies) {
		require.Equal(t, http.StatusCreated, r.Status, string(r.Body))
		var w created
		r.JSON(t, &w)
		require.Equal(t, withdrawal.StatusApproved, w.Status)
		require.Equal(t, bodies[i].ExternalUserID, *w.ExternalUserID, "each answer is its own request's")
		require.Equal(t, bodies[i].Destination, w.DestinationAddress)
		require.Equal(t, w.View, e.get(t, w.WithdrawalID))
	}
	for i, b := range bodies[:6] {
		held := fmt.Sprintf("0.000%d", 20_000+i)
		if b.ExternalUserID == "s-3" {
			held = fmt.Sprintf("0.000%d", 31_000+i)
		}
		require.Equal(t, held, e.UserBalance(t, b.ExternalUserID, asset.BTC).Held, b.ExternalUserID)
	}
	require.EqualValues(t, 7, e.Svc.CreatedInSharedPipeline())
	require.EqualValues(t, 10_000+6*20_000+15+11_000, e.windowTotal(t, asset.BTC))
	e.requireBooks(t)
}

// TestSharedPipelineOneShort: a short balance fails the shared transaction
// for all of them; each is written again alone, and only the short one is
// refused (402), its reservation given back.
func TestSharedPipelineOneShort(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.warmCopy(t)
	var bodies []createBody
	for i := range 5 {
		user := fmt.Sprint("o-", i)
		units := int64(100_000)
		if i == 2 {
			units = 10_000
		}
		e.fund(t, user, asset.BTC, units)
		bodies = append(bodies, createBody{ExternalUserID: user, Asset: asset.BTC, Amount: "20000",
			Destination: p2wpkh(t, chain.Regtest, user)})
	}
	for i, r := range e.sharedPipeline(t, bodies) {
		if i == 2 {
			require.Equal(t, http.StatusPaymentRequired, r.Status, string(r.Body))
			require.Equal(t, "0.00000000", e.UserBalance(t, "o-2", asset.BTC).Held)
			continue
		}
		require.Equal(t, http.StatusCreated, r.Status, string(r.Body))
		require.Equal(t, "0.00020000", e.UserBalance(t, bodies[i].ExternalUserID, asset.BTC).Held)
	}
	require.Zero(t, e.Svc.CreatedInSharedPipeline(), "the shared transaction rolled back")
	require.EqualValues(t, 10_000+4*20_000, e.windowTotal(t, asset.BTC), "the refused one's volume was given back")
	e.requireBooks(t)
}

// TestSharedPipelineOneRefusedReservation: a reservation refused in the
// middle of a shared pipeline (the destination is the service's own
// deposit address) stops it there; the one refused gets the ordinary
// way's answer (422), and every other is created.
func TestSharedPipelineOneRefusedReservation(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.warmCopy(t)
	r := e.Post("/v1/deposits", map[string]any{"external_user_id": "other", "asset": "BTC"})
	require.Equal(t, http.StatusCreated, r.Status, string(r.Body))
	own := r.Map(t)["address"].(string)
	var bodies []createBody
	for i := range 5 {
		user := fmt.Sprint("r-", i)
		dest := p2wpkh(t, chain.Regtest, user)
		if i == 2 {
			dest = own
		}
		e.fund(t, user, asset.BTC, 100_000)
		bodies = append(bodies, createBody{ExternalUserID: user, Asset: asset.BTC, Amount: "20000", Destination: dest})
	}
	for i, r := range e.sharedPipeline(t, bodies) {
		if i == 2 {
			require.Equal(t, http.StatusUnprocessableEntity, r.Status, string(r.Body))
			require.Contains(t, detail(t, r), "own deposit addresses")
			continue
		}
		require.Equal(t, http.StatusCreated, r.Status, string(r.Body))
		require.Equal(t, "0.00020000", e.UserBalance(t, bodies[i].ExternalUserID, asset.BTC).Held)
	}
	require.EqualValues(t, 10_000+4*20_000, e.windowTotal(t, asset.BTC))
	e.requireBooks(t)
}

// TestSharedPipelineOneKeyTwice: two requests with one Idempotency-Key and
// one body in the same shared pipeline create one withdrawal.
func TestSharedPipelineOneKeyTwice(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.warmCopy(t)
	e.fund(t, "twice", asset.BTC, 100_000)
	e.fund(t, "else", asset.BTC, 100_000)
	body := createBody{ExternalUserID: "twice", Asset: asset.BTC, Amount: "20000", Destination: p2wpkh(t, chain.Regtest, "twice")}
	other := createBody{ExternalUserID: "else", Asset: asset.BTC, Amount: "20000", Destination: p2wpkh(t, chain.Regtest, "else")}
	// Both same-key requests reach the pipeline unless one already
	// answered 409 (the key in flight): the flush waits for the ones that
	// do.
	answers := e.sharedRequests([]apptest.Req{apptestReq(body, "same"), apptestReq(body, "same"), apptestReq(other, "else")})
	ids := map[string]bool{}
	for _, r := range answers[:2] {
		switch r.Status {
		case http.StatusCreated:
			ids[r.Map(t)["withdrawal_id"].(string)] = true
		case http.StatusConflict:
		default:
			t.Fatalf("answer %d: %s", r.Status, r.Body)
		}
	}
	require.Len(t, ids, 1, "one withdrawal for the key")
	require.Equal(t, http.StatusCreated, answers[2].Status, string(answers[2].Body))
	require.Equal(t, "0.00020000", e.UserBalance(t, "twice", asset.BTC).Held)
	require.EqualValues(t, 10_000+2*20_000, e.windowTotal(t, asset.BTC))
	e.requireBooks(t)
}
