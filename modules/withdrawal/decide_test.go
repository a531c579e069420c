package withdrawal_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"svc/cmd/svc/app/apptest"
	"svc/modules/asset"
	"svc/modules/audit"
	"svc/modules/operator"
	"svc/modules/operator/operatortest"
	"svc/modules/withdrawal"
	"svc/platform/chain"
	"svc/platform/config"
)

// pending creates a BTC withdrawal that waits for an operator (its gross
// is above the auto limit of 0.01 BTC).
func (e *env) pending(t testing.TB, user string, units int64) created {
	t.Helper()
	w := e.create(t, user, asset.BTC, units, p2wpkh(t, chain.Regtest, fmt.Sprint(user, units, e.Clock.Now().UnixNano())))
	require.Equal(t, withdrawal.StatusPendingApproval, w.Status)
	return w
}

// TestApprove: approve moves pending_approval to approved with
// approval_mode manual and approved_by naming the key, records the audit
// row, and leaves the money held; approving again is 409.
func TestApprove(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.fund(t, "u", asset.BTC, 10_000_000)
	w := e.pending(t, "u", 2_000_000)
	r := e.decide(w.WithdrawalID, "approve", map[string]any{"note": "checked with support"})
	require.Equal(t, http.StatusOK, r.Status, string(r.Body))
	m := r.Map(t)
	require.Equal(t, "approved", m["status"])
	require.Equal(t, "manual", m["approval_mode"])
	require.Equal(t, e.AdminKeyID+" (test operator)", m["approved_by"])
	require.Nil(t, m["amount_to_send"], "BTC is paid by the service")
	require.EqualValues(t, 0, m["approvals_needed"])
	require.Equal(t, "approved", string(e.get(t, w.WithdrawalID).Status))
	require.Equal(t, "0.02000000", e.UserBalance(t, "u", asset.BTC).Held)

	rows := e.auditRows(t, w.WithdrawalID)
	require.Len(t, rows, 1)
	require.Equal(t, audit.WithdrawalApprove, rows[0].Action)
	require.Equal(t, e.AdminKeyID, rows[0].Actor)
	require.Equal(t, "test operator", rows[0].ActorLabel)
	require.Len(t, rows[0].RequestDigest, 64)
	require.Contains(t, string(rows[0].Detail), "checked with support")

	r = e.decide(w.WithdrawalID, "approve", map[string]any{})
	require.Equal(t, http.StatusConflict, r.Status, string(r.Body))
	require.Contains(t, detail(t, r), "cannot approve a withdrawal that is approved")
	require.Len(t, e.auditRows(t, w.WithdrawalID), 1, "a refused decision leaves no audit row")
}

// TestApproveOnlyFromPending: an auto-approved withdrawal cannot be
// approved or rejected (409); an unknown one is 404; a readwrite key is 403.
func TestApproveOnlyFromPending(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.fund(t, "u", asset.BTC, 10_000_000)
	w := e.create(t, "u", asset.BTC, 20_000, p2wpkh(t, chain.Regtest, "auto"))
	for _, action := range []string{"approve", "reject"} {
		r := e.decide(w.WithdrawalID, action, map[string]any{})
		require.Equal(t, http.StatusConflict, r.Status, string(r.Body))
		detail(t, r)
	}
	for _, id := range []string{"01a20000-0000-7000-8000-000000000000", "not-a-uuid"} {
		r := e.decide(id, "approve", nil)
		require.Equal(t, http.StatusNotFound, r.Status, string(r.Body))
	}
	r := e.decide(w.WithdrawalID, "approve", map[string]any{}, e.RW)
	require.Equal(t, http.StatusForbidden, r.Status, string(r.Body))
	r = e.Do(apptest.Req{Method: http.MethodPost, Path: "/v1/admin/withdrawals/" + w.WithdrawalID + "/approve", Key: e.Admin, Idem: "-"})
	require.Equal(t, http.StatusBadRequest, r.Status, "Idempotency-Key is required")
	require.Empty(t, e.auditRows(t, w.WithdrawalID))
}

// TestApproveUSDT: approving a USDT withdrawal fixes fee and net (gross
// minus the flat fee quoted at creation) and hands the operator the exact
// amount to send, the destination and the hot wallet.
func TestApproveUSDT(t *testing.T) {
	t.Parallel()
	hot := tron("hot")
	e := setup(t, func(c *config.Config) { c.Tron.HotWallet = hot })
	e.fund(t, "u", asset.USDTTRC20, 100_000_000)
	dest := tron("payee")
	w := e.create(t, "u", asset.USDTTRC20, 25_000_000, dest)
	// A fee change after creation does not change what this user was quoted.
	e.limits(t, asset.USDTTRC20, asset.Limits{FlatFee: n(5_000_000)})
	r := e.decide(w.WithdrawalID, "approve", nil)
	require.Equal(t, http.StatusOK, r.Status, string(r.Body))
	m := r.Map(t)
	require.Equal(t, "approved", m["status"])
	require.Equal(t, "2.000000", m["fee"])
	require.Equal(t, "23.000000", m["amount_net"])
	require.Equal(t, "23.000000", m["amount_to_send"])
	require.Equal(t, dest, m["destination_address"])
	require.Equal(t, hot, m["send_from"])
	v := e.get(t, w.WithdrawalID)
	require.Equal(t, "23.000000", *v.AmountNet)
}

// TestReject: reject returns the hold at once, in the same transaction;
// the withdrawal reads refunded with rejected_by and the reason; the audit
// trail has it; a second reject, or an approve after it, is 409.
func TestReject(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.fund(t, "u", asset.BTC, 10_000_000)
	w := e.pending(t, "u", 3_000_000)
	require.Equal(t, "0.03000000", e.UserBalance(t, "u", asset.BTC).Held)
	r := e.decide(w.WithdrawalID, "reject", map[string]any{"reason": "destination on a sanctions list"})
	require.Equal(t, http.StatusOK, r.Status, string(r.Body))
	m := r.Map(t)
	require.Equal(t, "refunded", m["status"])
	require.Equal(t, e.AdminKeyID+" (test operator)", m["rejected_by"])
	require.Equal(t, "rejected by an operator: destination on a sanctions list", m["failure_reason"])
	b := e.UserBalance(t, "u", asset.BTC)
	require.Equal(t, "0.00000000", b.Held)
	require.Equal(t, "0.10000000", b.Available)
	v := e.get(t, w.WithdrawalID)
	require.Equal(t, withdrawal.StatusRefunded, v.Status)
	require.Equal(t, "rejected by an operator: destination on a sanctions list", *v.FailureReason)
	rows := e.auditRows(t, w.WithdrawalID)
	require.Len(t, rows, 1)
	require.Equal(t, audit.WithdrawalReject, rows[0].Action)
	for _, action := range []string{"reject", "approve"} {
		r = e.decide(w.WithdrawalID, action, map[string]any{})
		require.Equal(t, http.StatusConflict, r.Status, string(r.Body))
	}
	// A reject without a reason.
	w2 := e.pending(t, "u", 2_000_000)
	r = e.decide(w2.WithdrawalID, "reject", nil)
	require.Equal(t, http.StatusOK, r.Status, string(r.Body))
	require.Equal(t, "rejected by an operator", r.Map(t)["failure_reason"])
}

// TestRelease: release needs a 10 to 2000 character attestation (422
// otherwise), is refused while pending approval (reject it) and once the
// money is back (409), and otherwise returns the hold and stores the
// attestation with released_by.
func TestRelease(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.fund(t, "u", asset.BTC, 10_000_000)
	w := e.pending(t, "u", 2_000_000)
	r := e.decide(w.WithdrawalID, "release", map[string]any{"attestation": "the payout was never created at the processor"})
	require.Equal(t, http.StatusConflict, r.Status, string(r.Body))
	require.Contains(t, detail(t, r), "reject it instead")
	r = e.decide(w.WithdrawalID, "approve", nil)
	require.Equal(t, http.StatusOK, r.Status, string(r.Body))
	for _, body := range []any{nil, map[string]any{}, map[string]any{"attestation": "too short"}, map[string]any{"attestation": strings.Repeat("x", 2001)}, map[string]any{"attestation": 12}} {
		r = e.decide(w.WithdrawalID, "release", body)
		require.Equal(t, http.StatusUnprocessableEntity, r.Status, "%v: %s", body, r.Body)
		require.Contains(t, joinLoc(r.FieldErrors(t)), "body")
	}
	att := "Checked the processor: no payout exists for this withdrawal and none can be created."
	r = e.decide(w.WithdrawalID, "release", map[string]any{"attestation": att})
	require.Equal(t, http.StatusOK, r.Status, string(r.Body))
	m := r.Map(t)
	require.Equal(t, "refunded", m["status"])
	require.Equal(t, att, m["release_attestation"])
	require.Equal(t, e.AdminKeyID+" (test operator)", m["released_by"])
	adm := e.admin(t, w.WithdrawalID)
	require.Equal(t, att, adm["release_attestation"])
	require.Equal(t, "0.00000000", e.UserBalance(t, "u", asset.BTC).Held)
	e.requireReleaseRefused(t, w.WithdrawalID, "already returned")
	rows := e.auditRows(t, w.WithdrawalID)
	require.Len(t, rows, 2)
	require.Equal(t, []string{audit.WithdrawalApprove, audit.WithdrawalRelease}, []string{rows[0].Action, rows[1].Action})
	var d map[string]any
	require.NoError(t, json.Unmarshal(rows[1].Detail, &d))
	require.Equal(t, att, d["attestation"])
}

// TestReleaseOfAConfirmedWithdrawalIsRefused: once the hold is paid out,
// release is 409 and the ledger refuses to return it.
func TestReleaseOfAConfirmedWithdrawalIsRefused(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.fund(t, "u", asset.BTC, 10_000_000)
	w := e.create(t, "u", asset.BTC, 50_000, p2wpkh(t, chain.Regtest, "paid"))
	// What the payout step will do: settle the hold and mark it confirmed.
	ctx := context.Background()
	_, err := e.App.DB.Bun.ExecContext(ctx, `UPDATE withdrawals SET status = 'confirmed', fee = 282, amount_net = 49718 WHERE id = ?`, w.WithdrawalID)
	require.NoError(t, err)
	settle(t, e, w.WithdrawalID, "u", 50_000, 49_718)
	r := e.decide(w.WithdrawalID, "release", map[string]any{"attestation": "trying to release a paid withdrawal"})
	require.Equal(t, http.StatusConflict, r.Status, string(r.Body))
	require.Contains(t, detail(t, r), "confirmed")
}

// TestConcurrentDecisions: parallel approves and rejects of one
// withdrawal: exactly one wins, the others are 409, and the money moved
// once.
func TestConcurrentDecisions(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.fund(t, "u", asset.BTC, 100_000_000)
	for round := 0; round < 5; round++ {
		w := e.pending(t, "u", 2_000_000)
		var wg sync.WaitGroup
		var mu sync.Mutex
		codes := map[int]int{}
		for i := 0; i < 10; i++ {
			wg.Add(1)
			go func(i int) {
				defer wg.Done()
				action := []string{"approve", "reject"}[i%2]
				r := e.decide(w.WithdrawalID, action, map[string]any{})
				mu.Lock()
				defer mu.Unlock()
				codes[r.Status]++
			}(i)
		}
		wg.Wait()
		require.Equal(t, map[int]int{http.StatusOK: 1, http.StatusConflict: 9}, codes)
		require.Len(t, e.auditRows(t, w.WithdrawalID), 1)
	}
}

// TestDecisionReplay: the same Idempotency-Key replays the decision's
// answer without a second effect.
func TestDecisionReplay(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.fund(t, "u", asset.BTC, 10_000_000)
	w := e.pending(t, "u", 2_000_000)
	req := apptest.Req{Method: http.MethodPost, Path: "/v1/admin/withdrawals/" + w.WithdrawalID + "/reject", Key: e.Admin, Idem: "reject-once", Body: map[string]any{}}
	first := e.Do(req)
	require.Equal(t, http.StatusOK, first.Status, string(first.Body))
	again := e.Do(req)
	require.Equal(t, http.StatusOK, again.Status)
	require.Equal(t, string(first.Body), string(again.Body))
	require.Len(t, e.auditRows(t, w.WithdrawalID), 1)
}

// TestFourEyes: above the asset's four-eyes threshold an approval counts
// only when an enrolled operator signed it: an unsigned one is 403, by any
// admin key; the first operator's signed approval is recorded and the
// withdrawal stays pending; the same operator again is 409; a second
// operator approves it, and approved_by names both. At or below the
// threshold one unsigned approval is enough (OPERATOR_SIGNATURES off).
func TestFourEyes(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.fund(t, "u", asset.BTC, 100_000_000)
	e.limits(t, asset.BTC, asset.Limits{FourEyesThreshold: &asset.Optional{Value: 5_000_000}})
	ops := e.team(t, operatortest.Member{Name: "alice", Role: operator.Admin}, operatortest.Member{Name: "bob", Role: operator.Approver})
	second := e.mintAdmin(t, "second operator")
	w := e.pending(t, "u", 5_000_001)
	for _, key := range []string{e.Admin, second} {
		r := e.decide(w.WithdrawalID, "approve", nil, key)
		require.Equal(t, http.StatusForbidden, r.Status, string(r.Body))
		require.Contains(t, detail(t, r), "two operators' signatures")
	}
	r := e.decideSigned(t, ops["alice"], w.WithdrawalID, "approve", nil)
	require.Equal(t, http.StatusOK, r.Status, string(r.Body))
	m := r.Map(t)
	require.Equal(t, "pending_approval", m["status"])
	require.EqualValues(t, 1, m["approvals_needed"])
	require.Nil(t, m["approved_by"])
	require.Len(t, m["approvals"], 1)
	r = e.decideSigned(t, ops["alice"], w.WithdrawalID, "approve", nil)
	require.Equal(t, http.StatusConflict, r.Status, string(r.Body))
	require.Contains(t, detail(t, r), "different operator")
	r = e.decideSigned(t, ops["bob"], w.WithdrawalID, "approve", map[string]any{"note": "second pair of eyes"}, second)
	require.Equal(t, http.StatusOK, r.Status, string(r.Body))
	m = r.Map(t)
	require.Equal(t, "approved", m["status"])
	require.EqualValues(t, 0, m["approvals_needed"])
	require.Equal(t, "op:alice, op:bob", m["approved_by"])
	rows := e.auditRows(t, w.WithdrawalID)
	require.Len(t, rows, 2)
	for i, name := range []string{"alice", "bob"} {
		require.Equal(t, "op:"+name, rows[i].Actor)
		require.Equal(t, name, *rows[i].Operator)
		require.Equal(t, ops[name].Public().ID(), *rows[i].KeyID)
	}

	small := e.pending(t, "u", 5_000_000)
	r = e.decide(small.WithdrawalID, "approve", nil)
	require.Equal(t, http.StatusOK, r.Status, string(r.Body))
	require.Equal(t, "approved", r.Map(t)["status"])

	// After a first approval, a reject by anyone still ends it.
	w3 := e.pending(t, "u", 6_000_000)
	require.Equal(t, http.StatusOK, e.decideSigned(t, ops["alice"], w3.WithdrawalID, "approve", nil).Status)
	r = e.decide(w3.WithdrawalID, "reject", map[string]any{"reason": "second operator disagrees"}, second)
	require.Equal(t, http.StatusOK, r.Status, string(r.Body))
	require.Equal(t, "refunded", r.Map(t)["status"])
}
