package withdrawal_test

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"svc/modules/asset"
	"svc/modules/audit"
	"svc/modules/operator"
	"svc/modules/operator/operatortest"
	"svc/platform/chain"
	"svc/platform/config"
	"svc/platform/dbtest"
	"svc/platform/fault"
)

// TestFourEyesCountsPeople: one operator with two keys is one operator
// (the second key's approval is 409, and so is the first key's through
// another admin API key); a key cannot be enrolled for a second name; a
// replayed signature is 401; two different operators approve, and the
// admin view lists both approvals with their signatures verified.
func TestFourEyesCountsPeople(t *testing.T) {
	t.Parallel()
	e := setup(t)
	ctx := context.Background()
	e.fund(t, "u", asset.BTC, 100_000_000)
	e.limits(t, asset.BTC, asset.Limits{FourEyesThreshold: &asset.Optional{Value: 5_000_000}})
	ops := e.team(t, operatortest.Member{Name: "alice", Role: operator.Admin}, operatortest.Member{Name: "bob", Role: operator.Approver})
	second := e.mintAdmin(t, "second operator")

	// alice's second key, added by the one admin (herself).
	svc := &operator.Service{DB: e.App.DB.Bun, Now: e.Clock.Now}
	key2 := operatortest.NewSigner(t)
	head, err := svc.Head(ctx, e.App.DB.Bun)
	require.NoError(t, err)
	add := operator.Change{Action: operator.ActionAddKey, Name: "alice", PublicKey: key2.Public().String()}
	res, err := svc.Submit(ctx, operatortest.Sign(t, ops["alice"], add.Statement(head, e.Clock.Now())))
	require.NoError(t, err)
	require.Equal(t, "applied", res.Status)
	// A key belongs to one operator: alice's key cannot become mallory's.
	head, err = svc.Head(ctx, e.App.DB.Bun)
	require.NoError(t, err)
	enroll := operator.Change{Action: operator.ActionEnroll, Name: "mallory", Role: operator.Approver, PublicKey: key2.Public().String()}
	_, err = svc.Submit(ctx, operatortest.Sign(t, ops["alice"], enroll.Statement(head, e.Clock.Now())))
	require.Equal(t, fault.Forbidden, fault.KindOf(err), "%v", err)
	require.ErrorContains(t, err, "already enrolled for alice")

	w := e.pending(t, "u", 8_000_000)
	first := e.signed(t, ops["alice"], e.expect(t, w.WithdrawalID, "approve", nil))
	r := e.decideWith(w.WithdrawalID, "approve", nil, first)
	require.Equal(t, http.StatusOK, r.Status, string(r.Body))
	require.EqualValues(t, 1, r.Map(t)["approvals_needed"])

	// The same statement again, with another Idempotency-Key: 401.
	r = e.decideWith(w.WithdrawalID, "approve", nil, first, second)
	require.Equal(t, http.StatusUnauthorized, r.Status, string(r.Body))
	require.Contains(t, detail(t, r), "already used")
	// alice with her other key, and with her first key through the other
	// admin API key: still alice.
	for _, c := range []struct {
		s   *operator.Signer
		key string
	}{{key2, e.Admin}, {key2, second}, {ops["alice"], second}} {
		r = e.decideSigned(t, c.s, w.WithdrawalID, "approve", nil, c.key)
		require.Equal(t, http.StatusConflict, r.Status, string(r.Body))
		require.Contains(t, detail(t, r), "different operator")
	}
	require.Equal(t, "pending_approval", string(e.get(t, w.WithdrawalID).Status))

	r = e.decideSigned(t, ops["bob"], w.WithdrawalID, "approve", map[string]any{"note": "checked the destination"}, second)
	require.Equal(t, http.StatusOK, r.Status, string(r.Body))
	require.Equal(t, "approved", r.Map(t)["status"])

	v := e.adminView(t, w.WithdrawalID)
	require.Equal(t, "op:alice, op:bob", *v.ApprovedBy)
	require.Len(t, v.Approvals, 2)
	for i, name := range []string{"alice", "bob"} {
		ap := v.Approvals[i]
		require.Equal(t, name, *ap.Operator)
		require.Equal(t, ops[name].Public().ID(), *ap.KeyID)
		require.Equal(t, "op:"+name, ap.Actor)
		require.NotNil(t, ap.SignedAt)
		require.True(t, ap.SignatureVerified, "%s's approval", name)
	}
	require.Nil(t, v.Approvals[0].Note)
	require.Equal(t, "checked the destination", *v.Approvals[1].Note)
	require.Len(t, e.auditRows(t, w.WithdrawalID), 2)

	// bob leaves: what he signed while enrolled still verifies.
	head, err = svc.Head(ctx, e.App.DB.Bun)
	require.NoError(t, err)
	revoke := operator.Change{Action: operator.ActionRevoke, Name: "bob"}
	_, err = svc.Submit(ctx, operatortest.Sign(t, ops["alice"], revoke.Statement(head, e.Clock.Now())))
	require.NoError(t, err)
	v = e.adminView(t, w.WithdrawalID)
	require.True(t, v.Approvals[1].SignatureVerified, "bob's approval, after his revocation")

	// A row changed afterwards no longer matches what was signed.
	_, err = e.App.DB.Bun.ExecContext(ctx, "UPDATE withdrawal_approvals SET note = 'edited' WHERE withdrawal_id = ? AND operator = 'bob'", w.WithdrawalID)
	require.NoError(t, err)
	v = e.adminView(t, w.WithdrawalID)
	require.True(t, v.Approvals[0].SignatureVerified)
	require.False(t, v.Approvals[1].SignatureVerified)
}

// TestSignedDecisionRefusals: a signature is compared with the withdrawal
// as it is when the decision commits: another amount, another destination
// (also the row's, changed after signing), another note, another withdrawal or
// another action is 403, as is a viewer's; a stale, future-dated,
// unenrolled or malformed signature is 401. Nothing is recorded; then a
// signature over the right facts decides.
func TestSignedDecisionRefusals(t *testing.T) {
	t.Parallel()
	e := setup(t)
	ctx := context.Background()
	e.fund(t, "u", asset.BTC, 100_000_000)
	ops := e.team(t, operatortest.Member{Name: "alice", Role: operator.Admin}, operatortest.Member{Name: "bob", Role: operator.Approver},
		operatortest.Member{Name: "vic", Role: operator.Viewer})
	w := e.pending(t, "u", 2_000_000)
	other := e.pending(t, "u", 3_000_000)
	now := e.Clock.Now()
	good := e.expect(t, w.WithdrawalID, "approve", nil)
	require.Equal(t, map[string]string{"asset": "BTC", "amount": "0.02000000", "destination": w.DestinationAddress}, good.Facts)
	with := func(k, v string) operator.Expect {
		x := e.expect(t, w.WithdrawalID, "approve", nil)
		x.Facts[k] = v
		return x
	}
	for _, c := range []struct {
		name   string
		h      map[string]string
		body   map[string]any
		status int
		msg    string
	}{
		{"another amount", e.signed(t, ops["bob"], with("amount", "0.03000000")), nil, http.StatusForbidden, "amount"},
		{"another destination", e.signed(t, ops["bob"], with("destination", p2wpkh(t, chain.Regtest, "mine"))), nil, http.StatusForbidden, "destination"},
		{"another note", e.signed(t, ops["bob"], good), map[string]any{"note": "not signed"}, http.StatusForbidden, "note"},
		{"another withdrawal", e.signed(t, ops["bob"], e.expect(t, other.WithdrawalID, "approve", nil)), nil, http.StatusForbidden, other.WithdrawalID},
		{"another action", e.signed(t, ops["bob"], e.expect(t, w.WithdrawalID, "reject", nil)), nil, http.StatusForbidden, audit.WithdrawalReject},
		{"a viewer", e.signed(t, ops["vic"], good), nil, http.StatusForbidden, "needs approver"},
		{"stale", operatortest.Header(t, ops["bob"], good, now.Add(-operator.MaxAge-time.Minute)), nil, http.StatusUnauthorized, "stale"},
		{"ahead", operatortest.Header(t, ops["bob"], good, now.Add(2*operator.MaxSkew)), nil, http.StatusUnauthorized, "ahead"},
		{"unenrolled", e.signed(t, operatortest.NewSigner(t), good), nil, http.StatusUnauthorized, "not an enrolled operator key"},
		{"malformed", map[string]string{operator.Header: "not-an-envelope"}, nil, http.StatusUnauthorized, operator.Header},
	} {
		var body any
		if c.body != nil {
			body = c.body
		}
		r := e.decideWith(w.WithdrawalID, "approve", body, c.h)
		require.Equal(t, c.status, r.Status, "%s: %s", c.name, r.Body)
		require.Contains(t, detail(t, r), c.msg, c.name)
	}

	// Signed over the destination the withdrawal had, changed since: the
	// runtime role cannot (the database refuses), the database's
	// superuser with the triggers off can, and the signature over the old
	// destination is then refused.
	signed := e.signed(t, ops["bob"], good)
	attacker := p2wpkh(t, chain.Regtest, "attacker")
	_, err := e.App.DB.Bun.ExecContext(ctx, "UPDATE withdrawals SET destination = ? WHERE id = ?", attacker, w.WithdrawalID)
	require.ErrorContains(t, err, "instructions never change")
	require.Equal(t, int64(1), dbtest.ExecBehindTriggers(t, e.DBURL, "UPDATE withdrawals SET destination = $1 WHERE id = $2", attacker, w.WithdrawalID))
	r := e.decideWith(w.WithdrawalID, "approve", nil, signed)
	require.Equal(t, http.StatusForbidden, r.Status, string(r.Body))
	require.Contains(t, detail(t, r), "destination")
	require.Empty(t, e.auditRows(t, w.WithdrawalID), "a refused decision leaves no audit row")
	require.Empty(t, e.adminView(t, w.WithdrawalID).Approvals)

	// Signed over what the service shows now: bob rejects it.
	r = e.decideSigned(t, ops["bob"], w.WithdrawalID, "reject", map[string]any{"reason": "destination changed"})
	require.Equal(t, http.StatusOK, r.Status, string(r.Body))
	require.Equal(t, "op:bob", r.Map(t)["rejected_by"])
	rows := e.auditRows(t, w.WithdrawalID)
	require.Len(t, rows, 1)
	require.Equal(t, "bob", *rows[0].Operator)
}

// TestSignaturesRequired: with OPERATOR_SIGNATURES=required an unsigned
// decision is 401, before anything else is checked; signed ones decide,
// named op:NAME.
func TestSignaturesRequired(t *testing.T) {
	t.Parallel()
	e := setup(t, func(c *config.Config) { c.Operators.Signatures = "required" })
	e.fund(t, "u", asset.BTC, 100_000_000)
	ops := e.team(t, operatortest.Member{Name: "alice", Role: operator.Admin})
	w := e.pending(t, "u", 2_000_000)
	for _, c := range []struct {
		decision string
		body     map[string]any
	}{{"approve", nil}, {"reject", nil}, {"release", map[string]any{"attestation": "nothing was ever sent for it"}}} {
		var body any
		if c.body != nil {
			body = c.body
		}
		r := e.decide(w.WithdrawalID, c.decision, body)
		require.Equal(t, http.StatusUnauthorized, r.Status, "%s: %s", c.decision, r.Body)
		require.Contains(t, detail(t, r), "needs an operator's signature", c.decision)
	}
	require.Empty(t, e.auditRows(t, w.WithdrawalID))
	r := e.decideSigned(t, ops["alice"], w.WithdrawalID, "approve", map[string]any{"note": "ok"})
	require.Equal(t, http.StatusOK, r.Status, string(r.Body))
	require.Equal(t, "op:alice", r.Map(t)["approved_by"])
	att := map[string]any{"attestation": "the payout was never created at the processor"}
	r = e.decideSigned(t, ops["alice"], w.WithdrawalID, "release", att)
	require.Equal(t, http.StatusOK, r.Status, string(r.Body))
	require.Equal(t, "op:alice", r.Map(t)["released_by"])
}

// TestSignedUSDT: once a USDT_TRC20 withdrawal is approved, its
// decisions state the net the operator sends (amount_to_send) and
// mark-broadcast its txid; a statement without them is 403.
func TestSignedUSDT(t *testing.T) {
	t.Parallel()
	u := setupUSDT(t)
	ops := u.team(t, operatortest.Member{Name: "alice", Role: operator.Admin})
	u.fund(t, "u", asset.USDTTRC20, 100_000_000)
	dest, err := chain.ParseTronAddress(tron("signed payee"))
	require.NoError(t, err)
	w := u.create(t, "u", asset.USDTTRC20, 25_000_000, dest.String())
	x := u.expect(t, w.WithdrawalID, "approve", nil)
	require.NotContains(t, x.Facts, "amount_to_send", "not fixed before approval")
	r := u.decideSigned(t, ops["alice"], w.WithdrawalID, "approve", nil)
	require.Equal(t, http.StatusOK, r.Status, string(r.Body))
	require.Equal(t, "23.000000", r.Map(t)["amount_to_send"])

	txid := u.Node.AddUSDTTransfer("", u.Hot, dest, 23_000_000, true)
	body := map[string]any{"txid": " " + txid + " "}
	x = u.expect(t, w.WithdrawalID, "mark-broadcast", body)
	require.Equal(t, map[string]string{"asset": asset.USDTTRC20, "amount": "25.000000", "destination": dest.String(),
		"amount_to_send": "23.000000", "txid": txid}, x.Facts)
	delete(x.Facts, "amount_to_send")
	r = u.decideWith(w.WithdrawalID, "mark-broadcast", body, u.signed(t, ops["alice"], x))
	require.Equal(t, http.StatusForbidden, r.Status, string(r.Body))
	require.Contains(t, detail(t, r), "amount_to_send")
	r = u.decideSigned(t, ops["alice"], w.WithdrawalID, "mark-broadcast", body)
	require.Equal(t, http.StatusOK, r.Status, string(r.Body))
	require.Equal(t, "broadcast", r.Map(t)["status"])
	require.Len(t, r.Map(t)["approvals"], 1)
}
