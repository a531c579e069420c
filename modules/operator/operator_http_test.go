package operator_test

import (
	"context"
	"encoding/hex"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"svc/cmd/svc/app/apptest"
	"svc/modules/operator"
	"svc/modules/operator/operatortest"
	"svc/platform/dbtest"
)

// TestOperatorsHTTP: the roster and its changes over the admin API. The
// first admin's self-signed init, one admin's signature while one exists,
// two different admins' once two exist (202 until the second; the same
// admin twice 409; an approver 403); a body that is not the statement's
// change 422; no signature 401; a replayed Idempotency-Key answers the
// stored response; an operator inserted by hand is listed as a
// discrepancy and its key is refused (401).
func TestOperatorsHTTP(t *testing.T) {
	t.Parallel()
	e := apptest.New(t)
	ctx := context.Background()

	list := func() operator.Listing {
		t.Helper()
		r := e.AdminGet("/v1/admin/operators")
		require.Equal(t, http.StatusOK, r.Status, string(r.Body))
		var l operator.Listing
		r.JSON(t, &l)
		return l
	}
	head := func() []byte {
		t.Helper()
		l := list()
		require.NotNil(t, l.ChainHead)
		h, err := hex.DecodeString(*l.ChainHead)
		require.NoError(t, err)
		return h
	}
	submit := func(s *operator.Signer, c operator.Change, body any, idem string) *apptest.Response {
		t.Helper()
		return e.Do(apptest.Req{Method: "POST", Path: "/v1/admin/operators/changes", Key: e.Admin, Body: body, Idem: idem,
			Header: operatortest.Header(t, s, c.Expect(head()), time.Now())})
	}
	result := func(r *apptest.Response, status int) operator.Result {
		t.Helper()
		require.Equal(t, status, r.Status, string(r.Body))
		var res operator.Result
		r.JSON(t, &res)
		return res
	}

	l := list()
	require.Empty(t, l.Operators)
	require.Equal(t, strings.Repeat("0", 64), *l.ChainHead)
	require.Equal(t, 1, l.Quorum)
	require.Empty(t, l.Discrepancies)
	require.Empty(t, l.Pending)

	alice, bob, carol, dave := operatortest.NewSigner(t), operatortest.NewSigner(t), operatortest.NewSigner(t), operatortest.NewSigner(t)
	initAlice := operator.Change{Action: operator.ActionInit, Name: "alice", Role: operator.Admin, PublicKey: alice.Public().String()}

	// No signature: 401, whatever OPERATOR_SIGNATURES says.
	r := e.Do(apptest.Req{Method: "POST", Path: "/v1/admin/operators/changes", Key: e.Admin, Body: map[string]any{}})
	require.Equal(t, http.StatusUnauthorized, r.Status, string(r.Body))

	res := result(submit(alice, initAlice, map[string]any{}, ""), http.StatusOK)
	require.Equal(t, "applied", res.Status)
	require.EqualValues(t, 1, *res.Seq)
	require.Equal(t, []string{"alice"}, res.SignedBy)
	r = submit(bob, operator.Change{Action: operator.ActionInit, Name: "bob", Role: operator.Admin, PublicKey: bob.Public().String()}, map[string]any{}, "")
	require.Equal(t, http.StatusConflict, r.Status, string(r.Body))

	// One admin: one signature, with the change repeated in the body; a
	// body that differs from the statement is 422.
	enrollBob := operator.Change{Action: operator.ActionEnroll, Name: "bob", Role: operator.Admin, PublicKey: bob.Public().String()}
	r = submit(alice, enrollBob, map[string]any{"name": "bob", "role": "approver"}, "")
	require.Equal(t, http.StatusUnprocessableEntity, r.Status, string(r.Body))
	require.Contains(t, string(r.Body), `the body's role \"approver\" is not the signed statement's \"admin\"`)
	res = result(submit(alice, enrollBob, map[string]any{"action": "operator.enroll", "name": "bob", "role": "admin", "public_key": enrollBob.PublicKey}, ""), http.StatusOK)
	require.EqualValues(t, 2, *res.Seq)

	// Two admins: 202 until a second, different admin signs; the request
	// replayed with its Idempotency-Key answers the same, once.
	enrollCarol := operator.Change{Action: operator.ActionEnroll, Name: "carol", Role: operator.Approver, PublicKey: carol.Public().String()}
	first := submit(alice, enrollCarol, map[string]any{}, "enroll-carol-alice")
	res = result(first, http.StatusAccepted)
	require.Equal(t, "pending", res.Status)
	require.Nil(t, res.Seq)
	require.Equal(t, 1, res.ApprovalsNeeded)
	again := e.Do(apptest.Req{Method: "POST", Path: "/v1/admin/operators/changes", Key: e.Admin, Body: map[string]any{}, Idem: "enroll-carol-alice"})
	require.Equal(t, http.StatusAccepted, again.Status, string(again.Body))
	require.Equal(t, "true", again.Header.Get("Idempotent-Replayed"))
	require.JSONEq(t, string(first.Body), string(again.Body))
	l = list()
	require.Len(t, l.Pending, 1)
	require.Equal(t, enrollCarol, l.Pending[0].Change)
	require.Equal(t, []string{"alice"}, l.Pending[0].SignedBy)
	require.Equal(t, 2, l.Quorum)
	r = submit(alice, enrollCarol, map[string]any{}, "")
	require.Equal(t, http.StatusConflict, r.Status, "alice twice counts once: %s", r.Body)
	res = result(submit(bob, enrollCarol, map[string]any{}, ""), http.StatusOK)
	require.Equal(t, []string{"alice", "bob"}, res.SignedBy)
	require.Empty(t, list().Pending)

	// An approver cannot sign a change of the operators.
	enrollDave := operator.Change{Action: operator.ActionEnroll, Name: "dave", Role: operator.Viewer, PublicKey: dave.Public().String()}
	r = submit(carol, enrollDave, map[string]any{}, "")
	require.Equal(t, http.StatusForbidden, r.Status, string(r.Body))

	l = list()
	require.Len(t, l.Operators, 3)
	require.Equal(t, operator.Approver, l.Operators[2].Role)
	require.Equal(t, carol.Public().ID(), l.Operators[2].Keys[0].KeyID)

	// mallory, inserted by hand as the runtime role: a discrepancy, and
	// her key is refused.
	mallory := operatortest.NewSigner(t)
	_, err := e.App.DB.Bun.ExecContext(ctx, "INSERT INTO operators (name, role, enrolled_seq) VALUES ('mallory', 'admin', 1)")
	require.NoError(t, err)
	_, err = e.App.DB.Bun.ExecContext(ctx, "INSERT INTO operator_keys (key_id, operator, public_key, added_seq) VALUES (?, 'mallory', ?, 1)",
		mallory.Public().ID(), mallory.Public().String())
	require.NoError(t, err)
	l = list()
	require.Len(t, l.Operators, 3, "mallory is no operator")
	require.Contains(t, l.Discrepancies, `operator "mallory" is not enrolled by the chain (inserted by hand?)`)
	r = submit(mallory, enrollDave, map[string]any{}, "")
	require.Equal(t, http.StatusUnauthorized, r.Status, string(r.Body))
	require.Contains(t, string(r.Body), "is not an enrolled operator key")
}

// TestAuditVerifyHTTP: GET /v1/admin/audit/verify verifies the trail of
// signed rows; an unsigned row of a signed action fails it (a warning with
// allow_unsigned=true); one byte of a stored row changed behind the
// triggers fails it, naming the row.
func TestAuditVerifyHTTP(t *testing.T) {
	t.Parallel()
	e := apptest.New(t)
	verify := func(query string) operator.AuditReport {
		t.Helper()
		r := e.AdminGet("/v1/admin/audit/verify" + query)
		require.Equal(t, http.StatusOK, r.Status, string(r.Body))
		var rep operator.AuditReport
		r.JSON(t, &rep)
		return rep
	}
	operatortest.Team(t, e.App.DB.Bun, time.Now,
		operatortest.Member{Name: "alice", Role: operator.Admin}, operatortest.Member{Name: "bob", Role: operator.Approver})

	// The harness's two key mints are unsigned rows of apikey.mint.
	rep := verify("")
	require.False(t, rep.OK)
	require.Equal(t, 2, rep.Unsigned)
	rep = verify("?allow_unsigned=true")
	require.True(t, rep.OK, "%+v", rep.Failures)
	require.Equal(t, 2, rep.Signed, "init and enroll, signed")
	require.Len(t, rep.Warnings, 2)
	require.NotEmpty(t, rep.ChainHead)

	// One byte of bob's enrollment row: "bob" becomes "bOb".
	require.EqualValues(t, 1, dbtestExec(t, e, "UPDATE audit_log SET target = 'bOb' WHERE action = 'operator.enroll' AND target = 'bob'"))
	rep = verify("?allow_unsigned=true")
	require.False(t, rep.OK)
	var named []string
	for _, f := range rep.Failures {
		require.Equal(t, rep.HeadSeq, f.Seq, "only the changed row, the last, is named: %+v", rep.Failures)
		named = append(named, f.Why)
	}
	require.Contains(t, strings.Join(named, "\n"), "hash does not match")
}

// dbtestExec runs query behind every trigger, as only a superuser could.
func dbtestExec(t *testing.T, e *apptest.Env, query string) int64 {
	t.Helper()
	return dbtest.ExecBehindTriggers(t, e.DBURL, query)
}
