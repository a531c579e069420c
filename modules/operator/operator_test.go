package operator_test

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"svc/modules/operator"
	"svc/modules/operator/operatortest"
	"svc/platform/dbtest"
	"svc/platform/fault"
)

// TestEnrollmentByQuorum: init enrolls the first admin only while no
// operator exists; with one admin, one signature enrolls; once two admins
// exist, a change waits for a second, different admin; the chain replays
// to the same roster, and the mirror tables agree with it.
func TestEnrollmentByQuorum(t *testing.T) {
	d := dbtest.New(t)
	ctx := context.Background()
	now := time.Now
	svc := &operator.Service{DB: d.Bun, Now: now}
	team := operatortest.Team(t, d.Bun, now,
		operatortest.Member{Name: "alice", Role: operator.Admin},
		operatortest.Member{Name: "bob", Role: operator.Admin},
		operatortest.Member{Name: "carol", Role: operator.Approver})

	r, err := svc.Roster(ctx, d.Bun)
	require.NoError(t, err)
	require.Equal(t, []string{"alice", "bob", "carol"}, r.Names())
	require.Equal(t, 2, r.Quorum())
	disc, err := operator.Discrepancies(ctx, d.Bun, r)
	require.NoError(t, err)
	require.Empty(t, disc)

	// init again is refused.
	eve := operatortest.NewSigner(t)
	c := operator.Change{Action: operator.ActionInit, Name: "eve", Role: operator.Admin, PublicKey: eve.Public().String()}
	_, err = svc.Submit(ctx, operatortest.Sign(t, eve, c.Statement(r.Head, now())))
	require.ErrorIs(t, err, operator.ErrInitDone)

	// Enrolling dave needs alice and bob; alice twice counts once.
	dave := operatortest.NewSigner(t)
	c = operator.Change{Action: operator.ActionEnroll, Name: "dave", Role: operator.Approver, PublicKey: dave.Public().String()}
	res, err := svc.Submit(ctx, operatortest.Sign(t, team["alice"], c.Statement(r.Head, now())))
	require.NoError(t, err)
	require.Equal(t, "pending", res.Status)
	require.Equal(t, 1, res.ApprovalsNeeded)
	_, err = svc.Submit(ctx, operatortest.Sign(t, team["alice"], c.Statement(r.Head, now())))
	require.ErrorIs(t, err, operator.ErrSameOperator)
	// carol is no admin.
	_, err = svc.Submit(ctx, operatortest.Sign(t, team["carol"], c.Statement(r.Head, now())))
	require.Equal(t, fault.Forbidden, fault.KindOf(err), "%v", err)
	res, err = svc.Submit(ctx, operatortest.Sign(t, team["bob"], c.Statement(r.Head, now())))
	require.NoError(t, err)
	require.Equal(t, "applied", res.Status)
	require.Equal(t, []string{"alice", "bob"}, res.SignedBy)

	// A statement on an old head is refused.
	c = operator.Change{Action: operator.ActionRevoke, Name: "carol"}
	_, err = svc.Submit(ctx, operatortest.Sign(t, team["alice"], c.Statement(r.Head, now())))
	require.Equal(t, fault.Forbidden, fault.KindOf(err), "%v", err)
	require.ErrorContains(t, err, "chain_head")

	// A stale statement is refused.
	r, err = svc.Roster(ctx, d.Bun)
	require.NoError(t, err)
	_, err = svc.Submit(ctx, operatortest.Sign(t, team["alice"], c.Statement(r.Head, now().Add(-operator.MaxAge-time.Minute))))
	require.Equal(t, fault.Unauthenticated, fault.KindOf(err), "%v", err)
	require.ErrorContains(t, err, "stale")

	// An operator row inserted by hand is no operator.
	mallory := operatortest.NewSigner(t)
	_, err = d.Bun.ExecContext(ctx, "INSERT INTO operators (name, role, enrolled_seq) VALUES ('mallory', 'admin', 1)")
	require.NoError(t, err)
	_, err = d.Bun.ExecContext(ctx, "INSERT INTO operator_keys (key_id, operator, public_key, added_seq) VALUES (?, 'mallory', ?, 1)",
		mallory.Public().ID(), mallory.Public().String())
	require.NoError(t, err)
	disc, err = operator.Discrepancies(ctx, d.Bun, r)
	require.NoError(t, err)
	require.Len(t, disc, 2, "%v", disc)
	_, err = svc.Submit(ctx, operatortest.Sign(t, mallory, c.Statement(r.Head, now())))
	require.Equal(t, fault.Unauthenticated, fault.KindOf(err), "%v", err)
	require.ErrorContains(t, err, "not an enrolled operator key")

	// The chain cannot be edited by the runtime role.
	_, err = d.Bun.ExecContext(ctx, "UPDATE operator_records SET change = '{}' WHERE seq = 1")
	require.ErrorContains(t, err, "permission denied")
	_, err = d.Bun.ExecContext(ctx, "DELETE FROM operator_records")
	require.ErrorContains(t, err, "permission denied")
}

// TestChainTamper: a record appended by hand, without admins' signatures,
// breaks the chain, and every signed action is then refused.
func TestChainTamper(t *testing.T) {
	d := dbtest.New(t)
	ctx := context.Background()
	svc := &operator.Service{DB: d.Bun, Now: time.Now}
	team := operatortest.Team(t, d.Bun, time.Now, operatortest.Member{Name: "alice", Role: operator.Admin})
	r, err := svc.Roster(ctx, d.Bun)
	require.NoError(t, err)
	// mallory signs her own enrollment and appends it.
	mallory := operatortest.NewSigner(t)
	c := operator.Change{Action: operator.ActionEnroll, Name: "mallory", Role: operator.Admin, PublicKey: mallory.Public().String()}
	env := operatortest.Sign(t, mallory, c.Statement(r.Head, time.Now()))
	_, err = d.Bun.ExecContext(ctx, `INSERT INTO operator_records (seq, prev_hash, hash, change, signatures)
		VALUES (2, ?, sha256('x'), ?, ?)`, r.Head, `{"action":"operator.enroll","name":"mallory","role":"admin","public_key":"`+c.PublicKey+`"}`,
		`[`+string(mustJSON(t, env))+`]`)
	require.NoError(t, err)
	_, err = svc.Roster(ctx, d.Bun)
	require.True(t, errors.Is(err, operator.ErrChain), "%v", err)
	x := operator.Expect{Action: "withdrawal.approve", Resource: "w1", Facts: map[string]string{}, Role: operator.Approver}
	_, err = svc.Verify(ctx, d.Bun, operatortest.Sign(t, team["alice"], operator.NewStatement(x.Action, x.Resource, x.Facts, time.Now())), x)
	require.Equal(t, fault.Forbidden, fault.KindOf(err))
	require.ErrorContains(t, err, "record 2")
}

func mustJSON(t *testing.T, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	require.NoError(t, err)
	return b
}
