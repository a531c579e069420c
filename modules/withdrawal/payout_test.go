package withdrawal_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"svc/cmd/svc/app/apptest"
	"svc/modules/alert"
	"svc/modules/asset"
	"svc/modules/ingress"
	"svc/modules/withdrawal"
	"svc/platform/btcpay"
	"svc/platform/btcpay/btcpaysim"
	"svc/platform/chain"
	"svc/platform/config"
)

// pass runs one pass of the worker's payout job.
func (e *env) pass(t testing.TB) {
	t.Helper()
	require.NoError(t, e.Svc.ProcessPayouts(context.Background()))
}

// row reads a withdrawal's row.
func (e *env) row(t testing.TB, id string) withdrawal.Withdrawal {
	t.Helper()
	w, err := e.Svc.Get(context.Background(), uuid.MustParse(id))
	require.NoError(t, err)
	return w
}

// payoutsOf returns the simulator's payouts that carry the withdrawal id.
func (e *env) payoutsOf(id string) []btcpaysim.PayoutInfo {
	var out []btcpaysim.PayoutInfo
	for _, p := range e.Sim.Payouts() {
		if p.WithdrawalID == id {
			out = append(out, p)
		}
	}
	return out
}

// onePayout is the withdrawal's only payout at the processor.
func (e *env) onePayout(t testing.TB, id string) btcpaysim.PayoutInfo {
	t.Helper()
	ps := e.payoutsOf(id)
	require.Len(t, ps, 1, "payouts of %s: %+v", id, e.Sim.Payouts())
	return ps[0]
}

// eventCount counts a withdrawal's outbound events of one type.
func (e *env) eventCount(t testing.TB, typ, id string) int {
	t.Helper()
	n, err := e.App.DB.Bun.NewSelect().Table("outbound_events").
		Where("type = ? AND payload->'data'->>'withdrawal_id' = ?", typ, id).Count(context.Background())
	require.NoError(t, err)
	return int(n)
}

// alerts returns the operator alerts of one type about a withdrawal.
func (e *env) alerts(t testing.TB, typ, id string) []alert.Alert {
	t.Helper()
	var out []alert.Alert
	require.NoError(t, e.App.DB.Bun.NewSelect().Model(&out).Where("type = ? AND subject = ?", typ, id).Scan(context.Background()))
	return out
}

// status is the withdrawal's status through the API.
func (e *env) status(t testing.TB, id string) withdrawal.Status {
	t.Helper()
	return e.get(t, id).Status
}

const att = "Checked the processor: the payout is cancelled and nothing was sent."

// TestPayoutOnChain: approved -> submitting -> submitted -> broadcast ->
// confirmed, with one payout carrying the withdrawal id, the fee fixed at
// submission, the events, and custody moved by the net plus the network
// fee the wallet actually paid.
func TestPayoutOnChain(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.fund(t, "pa", asset.BTC, 10_000_000)
	dest := p2wpkh(t, chain.Regtest, "payout on chain")
	w := e.create(t, "pa", asset.BTC, 100_000, dest)
	require.Equal(t, withdrawal.StatusApproved, w.Status)
	// The rate moves before submission: the fee is the one at submission.
	require.NoError(t, e.Sim.SetFeeRate("3"))
	e.Clock.Advance(time.Minute) // past BTC_FEE_RATE_TTL
	e.pass(t)
	v := e.get(t, w.WithdrawalID)
	require.Equal(t, withdrawal.StatusSubmitted, v.Status)
	require.Equal(t, "0.00000423", *v.Fee) // 3 sat/vB x 141 vB
	require.Equal(t, "0.00099577", *v.AmountNet)
	p := e.onePayout(t, w.WithdrawalID)
	require.Equal(t, "AwaitingPayment", p.State)
	require.Equal(t, "0.00099577", p.Amount)
	require.Equal(t, dest, p.Destination)
	adm := e.admin(t, w.WithdrawalID)
	require.Equal(t, p.ID, adm["backend_ref"])

	// Nothing changes while the processor has not sent it.
	e.passTo(t, w.WithdrawalID, withdrawal.StatusSubmitted)

	txid := e.broadcastPayout(t, p.ID, "")
	e.pass(t)
	v = e.get(t, w.WithdrawalID)
	require.Equal(t, withdrawal.StatusBroadcast, v.Status)
	require.Equal(t, txid, *v.Txid)
	require.Equal(t, int64(423), *e.row(t, w.WithdrawalID).NetworkFee) // the simulator's wallet paid 3 sat/vB x 141 vB
	require.Equal(t, 1, e.eventCount(t, "withdrawal.broadcast", w.WithdrawalID))
	require.Equal(t, "0.00100000", e.UserBalance(t, "pa", asset.BTC).Held)

	e.completePayout(t, p.ID)
	e.pass(t)
	e.pass(t)
	v = e.get(t, w.WithdrawalID)
	require.Equal(t, withdrawal.StatusConfirmed, v.Status)
	require.Equal(t, 1, e.eventCount(t, "withdrawal.broadcast", w.WithdrawalID))
	require.Equal(t, 1, e.eventCount(t, "withdrawal.completed", w.WithdrawalID))
	b := e.UserBalance(t, "pa", asset.BTC)
	require.Equal(t, "0.09900000", b.Available)
	require.Equal(t, "0.00000000", b.Held)
}

// TestPayoutBatchSharesTheNetworkFee: two payouts the processor sent in
// one transaction share its network fee exactly, the odd satoshi to the
// lower payout id. The payouts of the transaction are found through the
// links the payout processor keeps in the wallet's object graph, without
// reading the store's payout list; when the transaction links none (sent
// outside the processor), through the list.
func TestPayoutBatchSharesTheNetworkFee(t *testing.T) {
	t.Parallel()
	for _, linked := range []bool{true, false} {
		t.Run(map[bool]string{true: "Linked", false: "Listed"}[linked], func(t *testing.T) {
			t.Parallel()
			e := setup(t)
			e.fund(t, "pb", asset.BTC, 10_000_000)
			require.NoError(t, e.Sim.SetFeeRate("3"))
			e.Clock.Advance(time.Minute) // past BTC_FEE_RATE_TTL
			a := e.create(t, "pb", asset.BTC, 100_000, p2wpkh(t, chain.Regtest, "batch a"))
			b := e.create(t, "pb", asset.BTC, 200_000, p2wpkh(t, chain.Regtest, "batch b"))
			e.pass(t)
			pa, pb := e.onePayout(t, a.WithdrawalID), e.onePayout(t, b.WithdrawalID)
			txid := e.broadcastPayout(t, pa.ID, "")
			e.broadcastPayout(t, pb.ID, txid)
			if !linked {
				require.NoError(t, e.Sim.UnlinkTransaction(txid))
			}
			listed := e.Sim.PayoutListings()
			e.pass(t)
			if linked {
				require.Equal(t, listed, e.Sim.PayoutListings(), "the payout list is not read when the transaction links its payouts")
			} else {
				require.Greater(t, e.Sim.PayoutListings(), listed)
			}
			fa, fb := *e.row(t, a.WithdrawalID).NetworkFee, *e.row(t, b.WithdrawalID).NetworkFee
			require.Equal(t, int64(423), fa+fb, "3 sat/vB x 141 vB, paid once for the batch")
			if pa.ID < pb.ID {
				require.Equal(t, []int64{212, 211}, []int64{fa, fb})
			} else {
				require.Equal(t, []int64{211, 212}, []int64{fa, fb})
			}
			for _, p := range []btcpaysim.PayoutInfo{pa, pb} {
				e.completePayout(t, p.ID)
			}
			e.pass(t)
			e.pass(t)
			for _, id := range []string{a.WithdrawalID, b.WithdrawalID} {
				v := e.get(t, id)
				require.Equal(t, withdrawal.StatusConfirmed, v.Status)
				require.Equal(t, txid, *v.Txid)
			}
			require.Equal(t, "0.09700000", e.UserBalance(t, "pb", asset.BTC).Available)
		})
	}
}

// TestPayoutCompletedBetweenTwoLooks: a payout that went from
// AwaitingPayment to Completed while nobody looked is broadcast and
// confirmed in one step.
func TestPayoutCompletedBetweenTwoLooks(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.fund(t, "pb", asset.BTC, 10_000_000)
	w := e.create(t, "pb", asset.BTC, 50_000, p2tr(t, chain.Regtest, "between looks"))
	e.pass(t)
	e.completePayout(t, e.onePayout(t, w.WithdrawalID).ID)
	e.passTo(t, w.WithdrawalID, withdrawal.StatusConfirmed)
	require.Equal(t, 1, e.eventCount(t, "withdrawal.broadcast", w.WithdrawalID))
	require.Equal(t, 1, e.eventCount(t, "withdrawal.completed", w.WithdrawalID))
	// Both steps in one update: the row has what the broadcast records, and
	// withdrawal.broadcast tells the broadcast step.
	row := e.row(t, w.WithdrawalID)
	require.NotNil(t, row.Txid)
	require.NotNil(t, row.NetworkFee)
	var status string
	require.NoError(t, e.App.DB.Bun.NewSelect().Table("outbound_events").ColumnExpr("payload->'data'->>'status'").
		Where("type = 'withdrawal.broadcast' AND payload->'data'->>'withdrawal_id' = ?", w.WithdrawalID).Scan(context.Background(), &status))
	require.Equal(t, "broadcast", status)
}

// TestPayoutCreateTimesOutAfterCreating: the processor creates the payout
// but the answer is lost; the withdrawal stays submitting, and the retry
// finds the payout instead of creating another.
func TestPayoutCreateTimesOutAfterCreating(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.fund(t, "pc", asset.BTC, 10_000_000)
	w := e.create(t, "pc", asset.BTC, 60_000, p2wpkh(t, chain.Regtest, "timeout"))
	e.Sim.FailNext(1, btcpaysim.DownDropAfter)
	e.passTo(t, w.WithdrawalID, withdrawal.StatusSubmitting)
	p := e.onePayout(t, w.WithdrawalID) // it was created
	// Retried after the backoff, not before.
	e.passTo(t, w.WithdrawalID, withdrawal.StatusSubmitting)
	e.Clock.Advance(16 * time.Second)
	e.passTo(t, w.WithdrawalID, withdrawal.StatusSubmitted)
	require.Equal(t, p.ID, e.onePayout(t, w.WithdrawalID).ID)
	require.Equal(t, p.ID, *e.row(t, w.WithdrawalID).BackendRef)
	require.Equal(t, 2, e.row(t, w.WithdrawalID).SubmitAttempts)
}

// TestPayoutProcessorDown: a processor that is down leaves the withdrawal
// submitting with nothing created; it is submitted once it is back.
func TestPayoutProcessorDown(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.fund(t, "pd", asset.BTC, 10_000_000)
	w := e.create(t, "pd", asset.BTC, 60_000, p2wpkh(t, chain.Regtest, "down"))
	e.Sim.GoDown(btcpaysim.DownError)
	e.passTo(t, w.WithdrawalID, withdrawal.StatusSubmitting)
	e.Clock.Advance(16 * time.Second)
	e.passTo(t, w.WithdrawalID, withdrawal.StatusSubmitting)
	require.Empty(t, e.payoutsOf(w.WithdrawalID))
	e.Sim.Up()
	e.Clock.Advance(time.Minute)
	e.passTo(t, w.WithdrawalID, withdrawal.StatusSubmitted)
	e.onePayout(t, w.WithdrawalID)
}

// afterCreate is the processor with something happening right after its
// payout creation returned, before the submitter goes on: the worker
// killed (nothing after the call commits), another submitter taking the
// claim over.
type afterCreate struct {
	withdrawal.Processor
	then func()
}

func (c afterCreate) CreatePayout(ctx context.Context, p btcpay.CreatePayoutParams) (btcpay.Payout, error) {
	out, err := c.Processor.CreatePayout(ctx, p)
	c.then()
	return out, err
}

// adoptedOnceTheClaimEnds: once the submitter's claim has run out, the
// next pass adopts payout p, the withdrawal's only one.
func (e *env) adoptedOnceTheClaimEnds(t testing.TB, id string, p btcpaysim.PayoutInfo) {
	t.Helper()
	e.Clock.Advance(e.App.Cfg.BTCPay.Timeout*4 + time.Second)
	e.passTo(t, id, withdrawal.StatusSubmitted)
	require.Equal(t, p.ID, *e.row(t, id).BackendRef)
	e.onePayout(t, id)
}

// TestPayoutWorkerKilledAfterTheCall: the worker dies between the
// processor call and the commit of its outcome; after the claim expires
// the next pass finds the payout.
func TestPayoutWorkerKilledAfterTheCall(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.fund(t, "pe", asset.BTC, 10_000_000)
	w := e.create(t, "pe", asset.BTC, 70_000, p2wpkh(t, chain.Regtest, "killed"))
	real := e.Svc.Processor
	ctx, cancel := context.WithCancel(context.Background())
	// The process dies after the call: its next transaction never commits.
	e.Svc.Processor = afterCreate{Processor: real, then: cancel}
	err := e.Svc.Submit(ctx, uuid.MustParse(w.WithdrawalID))
	require.ErrorIs(t, err, context.Canceled)
	e.Svc.Processor = real
	row := e.row(t, w.WithdrawalID)
	require.Equal(t, withdrawal.StatusSubmitting, row.Status)
	require.NotNil(t, row.ClaimToken)
	p := e.onePayout(t, w.WithdrawalID)
	// The claim still stands: nobody touches it.
	e.passTo(t, w.WithdrawalID, withdrawal.StatusSubmitting)
	e.adoptedOnceTheClaimEnds(t, w.WithdrawalID, p)
}

// TestPayoutClaimLostBeforeAccept: a submitter whose claim was taken over
// while it created the payout records nothing (the newer claim stands);
// once that claim ends, the next pass adopts the payout, the only one.
func TestPayoutClaimLostBeforeAccept(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.fund(t, "pl", asset.BTC, 10_000_000)
	w := e.create(t, "pl", asset.BTC, 70_000, p2wpkh(t, chain.Regtest, "claim lost"))
	real := e.Svc.Processor
	other := uuid.New()
	// During the payout's creation another submitter takes the claim over
	// (as after the claim's end), with a claim of its own.
	e.Svc.Processor = afterCreate{Processor: real, then: func() {
		_, err := e.App.DB.Bun.NewRaw("UPDATE withdrawals SET claim_token = ? WHERE id = ?", other, w.WithdrawalID).Exec(context.Background())
		require.NoError(t, err)
	}}
	err := e.Svc.Submit(context.Background(), uuid.MustParse(w.WithdrawalID))
	require.ErrorContains(t, err, "the claim was lost")
	e.Svc.Processor = real
	row := e.row(t, w.WithdrawalID)
	require.Equal(t, withdrawal.StatusSubmitting, row.Status)
	require.Equal(t, other, *row.ClaimToken, "the newer claim stands")
	require.Nil(t, row.BackendRef)
	p := e.onePayout(t, w.WithdrawalID)
	e.adoptedOnceTheClaimEnds(t, w.WithdrawalID, p)
}

// TestPayoutSubmittersRace: many submitters and passes at once, one
// payout.
func TestPayoutSubmittersRace(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.fund(t, "pf", asset.BTC, 10_000_000)
	var ids []string
	for i := range 3 {
		ids = append(ids, e.create(t, "pf", asset.BTC, 40_000, p2wpkh(t, chain.Regtest, "race"+string(rune('a'+i)))).WithdrawalID)
	}
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if i%2 == 0 {
				assert(t, e.Svc.ProcessPayouts(context.Background()))
				return
			}
			for _, id := range ids {
				assert(t, e.Svc.Submit(context.Background(), uuid.MustParse(id)))
			}
		}()
	}
	wg.Wait()
	for _, id := range ids {
		require.Equal(t, withdrawal.StatusSubmitted, e.status(t, id))
		e.onePayout(t, id)
		require.Equal(t, 1, e.row(t, id).SubmitAttempts)
	}
}

func assert(t *testing.T, err error) {
	if err != nil {
		t.Error(err)
	}
}

// TestPayoutsToOneAddressInTurn: the processor refuses a second payout to
// an address while the first is open (duplicate-destination); the second
// withdrawal waits and is paid after the first.
func TestPayoutsToOneAddressInTurn(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.fund(t, "pg", asset.BTC, 10_000_000)
	dest := p2wpkh(t, chain.Regtest, "same address")
	first := e.create(t, "pg", asset.BTC, 30_000, dest)
	second := e.create(t, "pg", asset.BTC, 40_000, dest)
	e.passTo(t, first.WithdrawalID, withdrawal.StatusSubmitted)
	require.Equal(t, withdrawal.StatusApproved, e.status(t, second.WithdrawalID))
	require.Empty(t, e.payoutsOf(second.WithdrawalID))
	e.completePayout(t, e.onePayout(t, first.WithdrawalID).ID)
	e.passTo(t, first.WithdrawalID, withdrawal.StatusConfirmed)
	require.Equal(t, withdrawal.StatusApproved, e.status(t, second.WithdrawalID))
	e.Clock.Advance(withdrawal.RequeueWait)
	e.passTo(t, second.WithdrawalID, withdrawal.StatusSubmitted)
	e.completePayout(t, e.onePayout(t, second.WithdrawalID).ID)
	e.passTo(t, second.WithdrawalID, withdrawal.StatusConfirmed)
	require.Zero(t, e.eventCount(t, "withdrawal.failed", second.WithdrawalID))
}

// TestPayoutRefused: a definitive refusal fails the withdrawal with the
// processor's reason; the hold stays until an operator releases it, which
// is allowed because no payout exists.
func TestPayoutRefused(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.fund(t, "ph", asset.BTC, 10_000_000)
	w := e.create(t, "ph", asset.BTC, 50_000, p2wpkh(t, chain.Regtest, "refused"))
	e.Sim.SetPaymentMethods(btcpay.MethodBTCLN) // the store no longer pays on chain
	e.pass(t)
	v := e.get(t, w.WithdrawalID)
	require.Equal(t, withdrawal.StatusFailed, v.Status)
	require.Contains(t, *v.FailureReason, "refused the payout")
	require.Equal(t, 1, e.eventCount(t, "withdrawal.failed", w.WithdrawalID))
	require.Equal(t, "0.00050000", e.UserBalance(t, "ph", asset.BTC).Held)
	// Not retried: failed is not submitted again.
	e.Sim.SetPaymentMethods(btcpay.MethodBTCChain, btcpay.MethodBTCLN)
	e.Clock.Advance(time.Hour)
	e.passTo(t, w.WithdrawalID, withdrawal.StatusFailed)
	require.Empty(t, e.payoutsOf(w.WithdrawalID))
	r := e.decide(w.WithdrawalID, "release", map[string]any{"attestation": att})
	require.Equal(t, http.StatusOK, r.Status, string(r.Body))
	require.Equal(t, "0.00000000", e.UserBalance(t, "ph", asset.BTC).Held)
}

// TestPayoutFeeAtSubmissionLeavesDust: when the fee at submission would
// leave a net at or below the dust limit, nothing is sent and the
// withdrawal fails, keeping its hold.
func TestPayoutFeeAtSubmissionLeavesDust(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.fund(t, "pi", asset.BTC, 10_000_000)
	e.limits(t, asset.BTC, asset.Limits{Min: n(1_000), AutoLimit: n(1_000_000), DailyCap: n(10_000_000), FlatFee: n(0)})
	w := e.create(t, "pi", asset.BTC, 1_000, p2wpkh(t, chain.Regtest, "dust")) // net 718 at 2 sat/vB
	require.NoError(t, e.Sim.SetFeeRate("4"))                                  // 564 sat: net 436
	e.Clock.Advance(time.Minute)
	e.pass(t)
	v := e.get(t, w.WithdrawalID)
	require.Equal(t, withdrawal.StatusFailed, v.Status)
	require.Contains(t, *v.FailureReason, "dust limit")
	require.Nil(t, v.Fee)
	require.Empty(t, e.payoutsOf(w.WithdrawalID))
	require.Equal(t, 1, e.eventCount(t, "withdrawal.failed", w.WithdrawalID))
	require.Equal(t, "0.00001000", e.UserBalance(t, "pi", asset.BTC).Held)
}

// TestPayoutCancelledKeepsTheHold: a payout the processor cancels fails
// the withdrawal and keeps its hold; a release is refused while the payout
// is live and allowed once it is cancelled.
func TestPayoutCancelledKeepsTheHold(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.fund(t, "pj", asset.BTC, 10_000_000)
	w, p := e.submit(t, "pj", asset.BTC, 80_000, p2wpkh(t, chain.Regtest, "cancelled"))
	e.requireReleaseRefused(t, w.WithdrawalID, "AwaitingPayment at the processor, not cancelled")
	e.broadcastPayout(t, p.ID, "")
	e.passTo(t, w.WithdrawalID, withdrawal.StatusBroadcast)
	e.requireReleaseRefused(t, w.WithdrawalID, "InProgress")

	require.NoError(t, e.Sim.FailPayout(p.ID)) // the transaction was dropped
	e.pass(t)
	v := e.get(t, w.WithdrawalID)
	require.Equal(t, withdrawal.StatusFailed, v.Status)
	require.Contains(t, *v.FailureReason, "cancelled payout "+p.ID)
	require.Equal(t, 1, e.eventCount(t, "withdrawal.failed", w.WithdrawalID))
	require.Equal(t, "0.00080000", e.UserBalance(t, "pj", asset.BTC).Held)
	e.Clock.Advance(time.Hour)
	e.passTo(t, w.WithdrawalID, withdrawal.StatusFailed)
	require.Equal(t, 1, e.eventCount(t, "withdrawal.failed", w.WithdrawalID))

	r := e.decide(w.WithdrawalID, "release", map[string]any{"attestation": att})
	require.Equal(t, http.StatusOK, r.Status, string(r.Body))
	require.Equal(t, "refunded", r.Map(t)["status"])
	require.Equal(t, "0.00000000", e.UserBalance(t, "pj", asset.BTC).Held)
}

// TestPayoutFailedThenConfirmed: a payout the processor had cancelled
// confirms after all: the failed withdrawal is settled, not refunded, and
// a release is then refused.
func TestPayoutFailedThenConfirmed(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.fund(t, "pk", asset.BTC, 10_000_000)
	w, p := e.submit(t, "pk", asset.BTC, 90_000, p2wpkh(t, chain.Regtest, "failed then confirmed"))
	require.NoError(t, e.Sim.FailPayout(p.ID))
	e.passTo(t, w.WithdrawalID, withdrawal.StatusFailed)
	e.confirmCancelledPayout(t, p.ID)
	e.passTo(t, w.WithdrawalID, withdrawal.StatusConfirmed)
	require.Equal(t, 1, e.eventCount(t, "withdrawal.completed", w.WithdrawalID))
	r := e.decide(w.WithdrawalID, "release", map[string]any{"attestation": att})
	require.Equal(t, http.StatusConflict, r.Status, string(r.Body))
	b := e.UserBalance(t, "pk", asset.BTC)
	require.Equal(t, "0.09910000", b.Available)
	require.Equal(t, "0.00000000", b.Held)
}

// TestPayoutWebhooksDuplicatedAndReordered: the processor's payout
// webhooks, held and delivered in reverse order, each twice, carry the
// withdrawal to confirmed once, with no poll.
func TestPayoutWebhooksDuplicatedAndReordered(t *testing.T) {
	t.Parallel()
	e := setup(t, func(c *config.Config) { c.Payouts.PollInterval = time.Hour })
	e.fund(t, "pl", asset.BTC, 10_000_000)
	w, p := e.submit(t, "pl", asset.BTC, 75_000, p2wpkh(t, chain.Regtest, "webhooks"))
	e.Sim.SetWebhook(e.URL+"/webhooks/processor", hookSecret)
	e.Sim.DuplicateWebhooks(true)
	e.StartWorker() // its first pass runs at once; the next only in an hour
	e.Sim.HoldWebhooks()
	e.broadcastPayout(t, p.ID, "")
	e.completePayout(t, p.ID)
	e.Sim.ReleaseWebhooks(true)
	apptest.Eventually(t, 30*time.Second, func() bool {
		return e.status(t, w.WithdrawalID) == withdrawal.StatusConfirmed
	}, "confirmed by webhooks")
	require.Equal(t, 1, e.eventCount(t, "withdrawal.broadcast", w.WithdrawalID))
	require.Equal(t, 1, e.eventCount(t, "withdrawal.completed", w.WithdrawalID))
	for _, d := range e.Sim.Deliveries() {
		_, err := e.Sim.Redeliver(d.ID)
		require.NoError(t, err)
	}
	apptest.Eventually(t, 30*time.Second, func() bool { return e.Sim.PendingWebhooks() == 0 }, "redelivered")
	e.StopWorker()
	require.Equal(t, 1, e.eventCount(t, "withdrawal.completed", w.WithdrawalID))
}

// TestLightningPayout: a Lightning payout is broadcast (payment hash as
// txid) and confirmed once paid; a failed attempt that the processor
// retries changes nothing.
func TestLightningPayout(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.fund(t, "pm", asset.BTCLN, 10_000_000)
	inv := bolt11(t, chain.Regtest, e.Clock.Now(), 0, 2*time.Hour)
	w, p := e.submit(t, "pm", asset.BTCLN, 20_000, inv)
	require.Equal(t, "BTC-LN", p.Method)
	require.Equal(t, "0.00019990", p.Amount) // 20,000 sat minus the flat fee of 10
	require.NoError(t, e.Sim.StallPayout(p.ID))
	require.NoError(t, e.Sim.BouncePayout(p.ID))
	e.passTo(t, w.WithdrawalID, withdrawal.StatusSubmitted)
	hash := e.completePayout(t, p.ID)
	e.pass(t)
	v := e.get(t, w.WithdrawalID)
	require.Equal(t, withdrawal.StatusConfirmed, v.Status)
	require.Equal(t, hash, *v.Txid)
	require.Equal(t, 1, e.eventCount(t, "withdrawal.broadcast", w.WithdrawalID))
	require.Equal(t, 1, e.eventCount(t, "withdrawal.completed", w.WithdrawalID))
	// The published schema: the broadcast names the payment hash, the
	// completion has no transaction.
	rows, err := e.App.DB.Bun.QueryContext(context.Background(), `SELECT payload->'data'->>'txid' FROM outbound_events
 WHERE payload->'data'->>'withdrawal_id' = ? ORDER BY created_at, id`, w.WithdrawalID)
	require.NoError(t, err)
	defer rows.Close()
	var txids []sql.NullString
	for rows.Next() {
		var x sql.NullString
		require.NoError(t, rows.Scan(&x))
		txids = append(txids, x)
	}
	require.NoError(t, rows.Err())
	require.Equal(t, []sql.NullString{{String: hash, Valid: true}, {}}, txids)
}

// TestLightningTimeoutBeforeExpiry: a Lightning payout the processor has
// not managed to send is cancelled at LN_PAYOUT_TIMEOUT_SECONDS, and the
// withdrawal fails with one hold-needs-attestation alert; the hold
// returns by itself when the invoice expires.
func TestLightningTimeoutBeforeExpiry(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.fund(t, "pn", asset.BTCLN, 10_000_000)
	inv := bolt11(t, chain.Regtest, e.Clock.Now(), 0, 2*time.Hour)
	w, p := e.submit(t, "pn", asset.BTCLN, 30_000, inv) // AwaitingPayment: not routed yet
	e.Clock.Advance(59 * time.Minute)
	e.passTo(t, w.WithdrawalID, withdrawal.StatusSubmitted)
	require.Empty(t, e.alerts(t, withdrawal.AlertHoldNeedsAttestation, w.WithdrawalID))
	e.Clock.Advance(2 * time.Minute)
	e.pass(t)
	e.pass(t)
	v := e.get(t, w.WithdrawalID)
	require.Equal(t, withdrawal.StatusFailed, v.Status)
	require.Contains(t, *v.FailureReason, "LN_PAYOUT_TIMEOUT_SECONDS")
	alerts := e.alerts(t, withdrawal.AlertHoldNeedsAttestation, w.WithdrawalID)
	require.Len(t, alerts, 1)
	require.Contains(t, alerts[0].Detail, "The payout is cancelled, so it can no longer pay: the service returns it by itself once the invoice has expired (at ")
	require.Contains(t, alerts[0].Detail, "may release it before that")
	require.Equal(t, "0.00030000", e.UserBalance(t, "pn", asset.BTCLN).Held)
	q, _ := e.Sim.Payout(p.ID)
	require.Equal(t, "Cancelled", q.State) // it can no longer be sent
	e.Clock.Advance(time.Hour)
	e.pass(t)
	e.pass(t)
	adm := e.admin(t, w.WithdrawalID)
	require.Equal(t, "refunded", adm["status"])
	require.Equal(t, "system", adm["released_by"])
	require.Contains(t, adm["release_attestation"], "invoice expired")
	require.Len(t, e.alerts(t, withdrawal.AlertHoldNeedsAttestation, w.WithdrawalID), 1)
	require.Equal(t, 1, e.eventCount(t, "withdrawal.failed", w.WithdrawalID))
	require.Equal(t, "0.00000000", e.UserBalance(t, "pn", asset.BTCLN).Held)
}

// TestLightningTimeoutAfterExpiry: when the invoice has already expired at
// the deadline, the payout is cancelled, the hold returns at once and no
// alert is raised.
func TestLightningTimeoutAfterExpiry(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.fund(t, "po", asset.BTCLN, 10_000_000)
	inv := bolt11(t, chain.Regtest, e.Clock.Now(), 0, 30*time.Minute)
	w, _ := e.submit(t, "po", asset.BTCLN, 30_000, inv)
	e.Clock.Advance(31 * time.Minute) // expired, but before the deadline: still waiting
	e.passTo(t, w.WithdrawalID, withdrawal.StatusSubmitted)
	e.Clock.Advance(30 * time.Minute)
	e.passTo(t, w.WithdrawalID, withdrawal.StatusRefunded)
	require.Empty(t, e.alerts(t, withdrawal.AlertHoldNeedsAttestation, w.WithdrawalID))
	require.Equal(t, 1, e.eventCount(t, "withdrawal.failed", w.WithdrawalID))
	require.Equal(t, "0.00000000", e.UserBalance(t, "po", asset.BTCLN).Held)
}

// TestLightningUnroutableRefundedAtExpiry: a payment the processor gives
// up on fails the withdrawal; its hold returns when the invoice expires.
func TestLightningUnroutableRefundedAtExpiry(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.fund(t, "pp", asset.BTCLN, 10_000_000)
	inv := bolt11(t, chain.Regtest, e.Clock.Now(), 0, 20*time.Minute)
	w := e.create(t, "pp", asset.BTCLN, 30_000, inv)
	e.pass(t)
	require.NoError(t, e.Sim.FailPayout(e.onePayout(t, w.WithdrawalID).ID))
	e.passTo(t, w.WithdrawalID, withdrawal.StatusFailed)
	require.Len(t, e.alerts(t, withdrawal.AlertHoldNeedsAttestation, w.WithdrawalID), 1)
	e.Clock.Advance(21 * time.Minute)
	e.passTo(t, w.WithdrawalID, withdrawal.StatusRefunded)
}

// TestUSDTIsNeverSubmitted: approved USDT_TRC20 withdrawals are not handed
// to the processor.
func TestUSDTIsNeverSubmitted(t *testing.T) {
	t.Parallel()
	u := setupUSDT(t)
	u.fund(t, "pq", asset.USDTTRC20, 100_000_000)
	id, _ := u.approvedUSDT(t, "pq")
	u.pass(t)
	require.Equal(t, withdrawal.StatusApproved, u.status(t, id))
	require.Empty(t, u.Sim.Payouts())
}

// TestLightningInFlightKeepsTheHold: a payment in flight at the processor
// (InProgress, its outcome unknown) past the deadline and the invoice's
// expiry fails the withdrawal and raises the alert, which says so, but
// keeps the hold until the processor resolves it (a release is refused
// meanwhile): cancelled, then refunded.
func TestLightningInFlightKeepsTheHold(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.fund(t, "pr", asset.BTCLN, 10_000_000)
	inv := bolt11(t, chain.Regtest, e.Clock.Now(), 0, 30*time.Minute)
	w, p := e.submit(t, "pr", asset.BTCLN, 30_000, inv)
	require.NoError(t, e.Sim.StallPayout(p.ID))
	e.Clock.Advance(2 * time.Hour)
	e.pass(t)
	e.passTo(t, w.WithdrawalID, withdrawal.StatusFailed)
	alerts := e.alerts(t, withdrawal.AlertHoldNeedsAttestation, w.WithdrawalID)
	require.Len(t, alerts, 1)
	// The alert says what will happen: no automatic return at the
	// invoice's expiry, no release while in flight, and how long that
	// can last.
	d := alerts[0].Detail
	require.Contains(t, d, "InProgress at the processor")
	require.Contains(t, d, "The payment is in flight")
	require.Contains(t, d, "at most 2016 blocks (about 14 days)")
	require.Contains(t, d, "keeps the hold until the processor settles the payment")
	require.Contains(t, d, "a release is refused while the processor shows the payout in progress")
	require.NotContains(t, d, "returns automatically")
	require.NotContains(t, d, "Release it earlier")
	require.Equal(t, "0.00030000", e.UserBalance(t, "pr", asset.BTCLN).Held)
	e.requireReleaseRefused(t, w.WithdrawalID, "InProgress")
	e.Clock.Advance(3 * time.Hour) // long past the invoice's expiry
	e.passTo(t, w.WithdrawalID, withdrawal.StatusFailed)
	require.Equal(t, "0.00030000", e.UserBalance(t, "pr", asset.BTCLN).Held)
	require.NoError(t, e.Sim.FailPayout(p.ID))
	e.passTo(t, w.WithdrawalID, withdrawal.StatusRefunded)
	require.Equal(t, "0.00000000", e.UserBalance(t, "pr", asset.BTCLN).Held)
}

// TestPayoutSentAgain: a broadcast payout whose transaction was dropped is
// sent again in another transaction, at another fee: the withdrawal
// confirms with the second txid and the fee actually paid.
func TestPayoutSentAgain(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.fund(t, "ps", asset.BTC, 10_000_000)
	w, p := e.submit(t, "ps", asset.BTC, 100_000, p2wpkh(t, chain.Regtest, "sent again"))
	first := e.broadcastPayout(t, p.ID, "")
	e.pass(t)
	require.Equal(t, first, *e.get(t, w.WithdrawalID).Txid)
	require.NoError(t, e.Sim.BouncePayout(p.ID))
	require.NoError(t, e.Sim.SetFeeRate("20"))
	second := e.broadcastPayout(t, p.ID, "")
	e.pass(t)
	require.Equal(t, second, *e.get(t, w.WithdrawalID).Txid)
	require.Equal(t, int64(2820), *e.row(t, w.WithdrawalID).NetworkFee)
	e.completePayout(t, p.ID)
	e.pass(t)
	v := e.get(t, w.WithdrawalID)
	require.Equal(t, withdrawal.StatusConfirmed, v.Status)
	require.Equal(t, second, *v.Txid)
	require.Equal(t, 1, e.eventCount(t, "withdrawal.broadcast", w.WithdrawalID))
}

// forbidden is the processor answering 403 to every payout creation, as
// with an API key that lacks the permission.
type forbidden struct{ withdrawal.Processor }

func (forbidden) CreatePayout(context.Context, btcpay.CreatePayoutParams) (btcpay.Payout, error) {
	return btcpay.Payout{}, &btcpay.RefusedError{Op: "create payout", Status: http.StatusForbidden, Message: "missing permission"}
}

// TestPayoutAccessRefusedIsRetried: a processor that refuses the service's
// key (403) is a deployment problem, not the payout's: the withdrawal
// stays submitting, an operator alert says why, and it is paid once the
// key is fixed.
func TestPayoutAccessRefusedIsRetried(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.fund(t, "pt", asset.BTC, 10_000_000)
	w := e.create(t, "pt", asset.BTC, 100_000, p2wpkh(t, chain.Regtest, "forbidden"))
	real := e.Svc.Processor
	e.Svc.Processor = forbidden{real}
	e.passTo(t, w.WithdrawalID, withdrawal.StatusSubmitting)
	require.Len(t, e.alerts(t, withdrawal.AlertSubmissionStuck, w.WithdrawalID), 1)
	require.Zero(t, e.eventCount(t, "withdrawal.failed", w.WithdrawalID))
	e.Svc.Processor = real
	e.Clock.Advance(5 * time.Minute)
	e.passTo(t, w.WithdrawalID, withdrawal.StatusSubmitted)
	e.onePayout(t, w.WithdrawalID)
}

// TestPaidAfterRefundIsSeenWithoutWebhooks: a payout that completes after
// its withdrawal was released (the processor had cancelled it) is found by
// the worker's pass, with no webhook, and raises one alert; the withdrawal
// stays refunded (the books say what the service did; an operator
// recovers the money).
func TestPaidAfterRefundIsSeenWithoutWebhooks(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.fund(t, "pu", asset.BTC, 10_000_000)
	w, p := e.submit(t, "pu", asset.BTC, 60_000, p2wpkh(t, chain.Regtest, "paid after refund"))
	require.NoError(t, e.Sim.FailPayout(p.ID))
	e.pass(t)
	r := e.decide(w.WithdrawalID, "release", map[string]any{"attestation": att})
	require.Equal(t, http.StatusOK, r.Status, string(r.Body))
	e.confirmCancelledPayout(t, p.ID)
	e.pass(t)
	e.passTo(t, w.WithdrawalID, withdrawal.StatusRefunded)
	require.Len(t, e.alerts(t, withdrawal.AlertPaidAfterRefund, w.WithdrawalID), 1)
	e.Clock.Advance(withdrawal.RefundWatch + time.Hour)
	e.pass(t)
	require.Len(t, e.alerts(t, withdrawal.AlertPaidAfterRefund, w.WithdrawalID), 1)
}

// TestOnePassPaysABacklog: a pass takes batch after batch of what is due
// (here 45 withdrawals, more than two of its lists of 20), several lanes at
// once, so a backlog is paid in one pass rather than one list per
// PAYOUT_POLL_INTERVAL; each withdrawal gets one payout, the ones to one
// address in turn.
func TestOnePassPaysABacklog(t *testing.T) {
	t.Parallel()
	e := setupSim(t, btcpaysim.Options{AutoCompletePayouts: true})
	// What is measured is that one pass takes every batch, not how fast
	// the machine is: the budget would end a pass early under load.
	e.Svc.Config.SubmitBudget = time.Hour
	e.Svc.Config.PayoutBatch = 20
	e.limits(t, asset.BTC, asset.Limits{AutoLimit: n(1 << 40), DailyCap: n(1 << 60)})
	const total = 45
	users, dests := make([]string, 5), make([]string, 12)
	for i := range users {
		users[i] = fmt.Sprint("backlog-", i)
		e.fund(t, users[i], asset.BTC, 100_000_000)
	}
	for i := range dests {
		dests[i] = p2wpkh(t, chain.Regtest, fmt.Sprint("backlog dest ", i))
	}
	ids := make([]string, total)
	for i := range ids {
		ids[i] = e.create(t, users[i%len(users)], asset.BTC, 20_000+int64(i), dests[i%len(dests)]).WithdrawalID
	}
	e.pass(t)
	for _, id := range ids {
		require.Equal(t, withdrawal.StatusConfirmed, e.row(t, id).Status, id)
		e.onePayout(t, id)
	}
	require.Len(t, e.Sim.Payouts(), total)
}

// TestConfirmedNeedsNoProcessor: a payout webhook that arrives after its
// withdrawal is confirmed (each payout's last ones do) is answered
// without asking the processor, even when it is down.
func TestConfirmedNeedsNoProcessor(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.fund(t, "pv", asset.BTC, 10_000_000)
	w, p := e.submit(t, "pv", asset.BTC, 60_000, p2wpkh(t, chain.Regtest, "confirmed, then a webhook"))
	e.completePayout(t, p.ID)
	e.passTo(t, w.WithdrawalID, withdrawal.StatusConfirmed)
	e.Sim.GoDown(btcpaysim.DownError)
	defer e.Sim.Up()
	require.NoError(t, e.Svc.PayoutEvent(context.Background(), ingress.PayoutEvent{Type: btcpay.EventPayoutUpdated, PayoutID: p.ID}))
	require.NoError(t, e.Svc.Track(context.Background(), uuid.MustParse(w.WithdrawalID)))
}

// TestOneClaimOfARowAsRead: the claim is one guarded statement on the row
// as read, without a lock. Two submitters that read the same row (a pass's
// list and a later submission) claim it once: the one that comes second
// finds it moved on and does nothing, so one payout is made in one
// attempt. A row read before reconciliation halted its asset is not
// claimed either.
func TestOneClaimOfARowAsRead(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e := setup(t)
	e.fund(t, "ra", asset.BTC, 10_000_000)
	w := e.create(t, "ra", asset.BTC, 40_000, p2wpkh(t, chain.Regtest, "as read"))
	read := e.row(t, w.WithdrawalID)
	require.NoError(t, withdrawal.SubmitRow(ctx, e.Svc, read))
	require.NoError(t, withdrawal.SubmitRow(ctx, e.Svc, read), "the second claim finds the row moved on")
	row := e.row(t, w.WithdrawalID)
	require.Equal(t, withdrawal.StatusSubmitted, row.Status)
	require.Equal(t, 1, row.SubmitAttempts)
	e.onePayout(t, w.WithdrawalID)

	halted := e.create(t, "ra", asset.BTC, 50_000, p2wpkh(t, chain.Regtest, "halted after the read"))
	read = e.row(t, halted.WithdrawalID)
	_, err := e.App.DB.Bun.ExecContext(ctx, "UPDATE assets SET withdrawals_halted_since = now() WHERE asset = 'BTC'")
	require.NoError(t, err)
	require.NoError(t, withdrawal.SubmitRow(ctx, e.Svc, read))
	row = e.row(t, halted.WithdrawalID)
	require.Equal(t, withdrawal.StatusApproved, row.Status, "nothing is handed over for a halted asset")
	require.Zero(t, row.SubmitAttempts)
	require.Empty(t, e.payoutsOf(halted.WithdrawalID))
	_, err = e.App.DB.Bun.ExecContext(ctx, "UPDATE assets SET withdrawals_halted_since = NULL WHERE asset = 'BTC'")
	require.NoError(t, err)
	require.NoError(t, withdrawal.SubmitRow(ctx, e.Svc, read))
	require.Equal(t, withdrawal.StatusSubmitted, e.row(t, halted.WithdrawalID).Status)
}

// failWallet fails the first two reads of a wallet transaction.
type failWallet struct {
	withdrawal.Processor
	reads *atomic.Int32
}

func (f failWallet) WalletTransaction(ctx context.Context, txid string) (btcpay.WalletTransaction, error) {
	if f.reads.Add(1) <= 2 {
		return btcpay.WalletTransaction{}, errors.New("wallet unreachable")
	}
	return f.Processor.WalletTransaction(ctx, txid)
}

// TestCompletedAnswerRecordedAtOnce: a payout the processor answers as
// completed is recorded with its broadcast and settlement in one
// transaction (submitting to confirmed, both events, the books whole).
// A claim lost during the call writes nothing, and the next attempt
// adopts the payout; a network fee that cannot be read at once leaves
// the ordinary way, which records the payout as accepted first, so the
// payout id is never lost.
func TestCompletedAnswerRecordedAtOnce(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e := setupSim(t, btcpaysim.Options{AutoCompletePayouts: true})
	e.fund(t, "ca", asset.BTC, 10_000_000)

	w := e.create(t, "ca", asset.BTC, 60_000, p2wpkh(t, chain.Regtest, "at once"))
	require.NoError(t, e.Svc.Submit(ctx, uuid.MustParse(w.WithdrawalID)))
	row := e.row(t, w.WithdrawalID)
	require.Equal(t, withdrawal.StatusConfirmed, row.Status)
	p := e.onePayout(t, w.WithdrawalID)
	require.Equal(t, p.ID, *row.BackendRef)
	require.NotNil(t, row.Txid)
	require.NotNil(t, row.NetworkFee)
	require.NotNil(t, row.SubmittedAt)
	require.Nil(t, row.ClaimToken)
	require.Equal(t, 1, e.eventCount(t, "withdrawal.broadcast", w.WithdrawalID))
	require.Equal(t, 1, e.eventCount(t, "withdrawal.completed", w.WithdrawalID))
	var status string
	require.NoError(t, e.App.DB.Bun.NewSelect().Table("outbound_events").ColumnExpr("payload->'data'->>'status'").
		Where("type = 'withdrawal.broadcast' AND payload->'data'->>'withdrawal_id' = ?", w.WithdrawalID).Scan(ctx, &status))
	require.Equal(t, "broadcast", status, "withdrawal.broadcast tells the broadcast step")

	// The claim taken over during the call: nothing written.
	lost := e.create(t, "ca", asset.BTC, 70_000, p2wpkh(t, chain.Regtest, "claim lost at once"))
	real := e.Svc.Processor
	e.Svc.Processor = afterCreate{Processor: real, then: func() {
		_, err := e.App.DB.Bun.NewRaw("UPDATE withdrawals SET claim_token = ? WHERE id = ?", uuid.New(), lost.WithdrawalID).Exec(ctx)
		require.NoError(t, err)
	}}
	require.ErrorContains(t, e.Svc.Submit(ctx, uuid.MustParse(lost.WithdrawalID)), "the claim was lost")
	e.Svc.Processor = real
	row = e.row(t, lost.WithdrawalID)
	require.Equal(t, withdrawal.StatusSubmitting, row.Status)
	require.Nil(t, row.BackendRef)
	require.Zero(t, e.eventCount(t, "withdrawal.broadcast", lost.WithdrawalID))
	lp := e.onePayout(t, lost.WithdrawalID)
	e.Clock.Advance(e.App.Cfg.BTCPay.Timeout*4 + time.Second)
	e.passTo(t, lost.WithdrawalID, withdrawal.StatusConfirmed)
	require.Equal(t, lp.ID, *e.row(t, lost.WithdrawalID).BackendRef)
	e.onePayout(t, lost.WithdrawalID)

	// The network fee unreadable at once: accepted, then followed.
	slow := e.create(t, "ca", asset.BTC, 80_000, p2wpkh(t, chain.Regtest, "fee unreadable"))
	e.Svc.Processor = failWallet{Processor: real, reads: new(atomic.Int32)}
	err := e.Svc.Submit(ctx, uuid.MustParse(slow.WithdrawalID))
	require.ErrorContains(t, err, "wallet unreachable")
	e.Svc.Processor = real
	row = e.row(t, slow.WithdrawalID)
	require.Equal(t, withdrawal.StatusSubmitted, row.Status, "the payout is recorded whatever the fee's read")
	require.Equal(t, e.onePayout(t, slow.WithdrawalID).ID, *row.BackendRef)
	e.passTo(t, slow.WithdrawalID, withdrawal.StatusConfirmed)
	require.Equal(t, 1, e.eventCount(t, "withdrawal.completed", slow.WithdrawalID))
}

// feeDeadline records the deadline of the first read of a wallet
// transaction and fails it.
type feeDeadline struct {
	withdrawal.Processor
	deadline *time.Time
	had      *atomic.Bool
}

func (f feeDeadline) WalletTransaction(ctx context.Context, txid string) (btcpay.WalletTransaction, error) {
	if f.had.CompareAndSwap(false, true) {
		d, ok := ctx.Deadline()
		if ok {
			*f.deadline = d
		}
		return btcpay.WalletTransaction{}, errors.New("wallet unreachable")
	}
	return f.Processor.WalletTransaction(ctx, txid)
}

// TestCompletedAnswerReadsWithinTheClaim: the network fee of a completed
// answer is read before the payout is recorded, so those reads end before
// the claim does, as the submission's own calls do.
func TestCompletedAnswerReadsWithinTheClaim(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e := setupSim(t, btcpaysim.Options{AutoCompletePayouts: true})
	e.fund(t, "cd", asset.BTC, 10_000_000)
	w := e.create(t, "cd", asset.BTC, 60_000, p2wpkh(t, chain.Regtest, "within the claim"))
	var deadline time.Time
	real := e.Svc.Processor
	e.Svc.Processor = feeDeadline{Processor: real, deadline: &deadline, had: new(atomic.Bool)}
	before := time.Now()
	require.NoError(t, e.Svc.Submit(ctx, uuid.MustParse(w.WithdrawalID)))
	e.Svc.Processor = real
	require.False(t, deadline.IsZero(), "the read had a deadline")
	require.True(t, deadline.Before(before.Add(e.App.Cfg.BTCPay.Timeout*4)), "it ends before the claim: %s", deadline.Sub(before))
	require.Equal(t, withdrawal.StatusConfirmed, e.row(t, w.WithdrawalID).Status, "the ordinary way confirmed it")
}
