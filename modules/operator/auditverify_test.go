package operator_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"svc/modules/audit"
	"svc/modules/operator"
	"svc/modules/operator/operatortest"
	"svc/platform/dbtest"
)

// rehash recomputes the chain of rows from i on, as someone who rewrote
// row i and everything after it would: then only what the hash chain
// cannot see (signatures, the enrollment chain) tells.
func rehash(rows []audit.Row, i int) {
	prev := make([]byte, 32)
	if i > 0 {
		prev, _ = hex.DecodeString(rows[i-1].Hash)
	}
	for ; i < len(rows); i++ {
		rows[i].PrevHash = hex.EncodeToString(prev)
		sum := sha256.Sum256(append(append([]byte{}, prev...), rows[i].Canonical...))
		rows[i].Hash = hex.EncodeToString(sum[:])
		prev = sum[:]
	}
}

// clone copies an export deeply enough for one tamper.
func clone(t *testing.T, x operator.AuditExport) operator.AuditExport {
	t.Helper()
	b, err := json.Marshal(x)
	require.NoError(t, err)
	y, err := operator.ReadAuditExport(bytes.NewReader(b))
	require.NoError(t, err)
	return y
}

// TestVerifyAudit: a trail of signed rows and its enrollment chain verify,
// through an export's JSON too; each tamper that the hash chain cannot
// see, because the rows after it were hashed again, is still named: a
// target that is not the signed resource, an operator column that is not
// the key's operator, a record removed from the enrollment chain, an
// unsigned row of a signed action; and a row removed from the middle.
func TestVerifyAudit(t *testing.T) {
	d := dbtest.New(t)
	ctx := context.Background()
	team := operatortest.Team(t, d.Bun, time.Now,
		operatortest.Member{Name: "alice", Role: operator.Admin},
		operatortest.Member{Name: "bob", Role: operator.Approver})
	svc := &operator.Service{DB: d.Bun, Now: time.Now}
	x := operator.Expect{Action: audit.AssetSetLimits, Resource: "BTC", Facts: map[string]string{"withdrawal_min": "0.0002"}, Role: operator.Admin}
	sig, err := svc.Verify(ctx, d.Bun, operatortest.Sign(t, team["alice"], operator.NewStatement(x.Action, x.Resource, x.Facts, time.Now())), x)
	require.NoError(t, err)
	_, err = audit.Record(ctx, d.Bun, time.Now(), operator.ActorOf(sig), x.Action, x.Resource, x.Facts)
	require.NoError(t, err)
	// An action no operator signs (a liabilities snapshot, say).
	_, err = audit.Record(ctx, d.Bun, time.Now(), audit.CLI("ops"), "liabilities.snapshot", "BTC", map[string]string{})
	require.NoError(t, err)

	exp, err := operator.ExportAudit(ctx, d.Bun, operator.RelyingParty{}, time.Now())
	require.NoError(t, err)
	require.Len(t, exp.AuditLog, 4)
	require.Len(t, exp.OperatorRecords, 2)
	rep := operator.VerifyAudit(clone(t, exp), false)
	require.True(t, rep.OK, "%+v", rep.Failures)
	require.Equal(t, 3, rep.Signed)
	require.Empty(t, rep.Warnings)
	require.Equal(t, exp.AuditLog[3].Hash, rep.HeadHash)

	failures := func(y operator.AuditExport) []string {
		t.Helper()
		rep := operator.VerifyAudit(y, false)
		require.False(t, rep.OK)
		var out []string
		for _, f := range rep.Failures {
			out = append(out, f.String())
		}
		return out
	}

	// The signed row's target, rewritten with its canonical text and
	// every hash after it.
	y := clone(t, exp)
	y.AuditLog[2].Target = "ETH"
	y.AuditLog[2].Canonical = strings.Replace(y.AuditLog[2].Canonical, `"BTC"`, `"ETH"`, 1)
	rehash(y.AuditLog, 2)
	require.Equal(t, []string{`seq 3 (id 3): the signed statement is for resource "BTC", the row records target "ETH"`}, failures(y))

	// Its operator column says bob.
	y = clone(t, exp)
	bob := "bob"
	y.AuditLog[2].Operator = &bob
	y.AuditLog[2].Canonical = strings.Replace(y.AuditLog[2].Canonical, `, "alice", "opk_`, `, "bob", "opk_`, 1)
	rehash(y.AuditLog, 2)
	require.Equal(t, []string{"seq 3 (id 3): its operator column is bob, key " + team["alice"].Public().ID() + " is alice's"}, failures(y))

	// bob's enrollment record removed from the chain: the tables still
	// name him and his key.
	y = clone(t, exp)
	y.OperatorRecords = y.OperatorRecords[:1]
	got := failures(y)
	require.Len(t, got, 2, "%q", got)
	require.Contains(t, got, `operators: operator "bob" is not enrolled by the chain (inserted by hand?)`)

	// An unsigned row of a signed action, inserted by hand and hashed in.
	y = clone(t, exp)
	row := y.AuditLog[3]
	row.Seq, row.ID, row.Action = 5, 5, audit.WithdrawalApprove
	row.Canonical = strings.Replace(strings.Replace(row.Canonical, "[4, 4,", "[5, 5,", 1), `"liabilities.snapshot"`, `"withdrawal.approve"`, 1)
	y.AuditLog = append(y.AuditLog, row)
	rehash(y.AuditLog, 4)
	require.Equal(t, []string{"seq 5 (id 5): withdrawal.approve of BTC by cli:ops: " + operator.Unsigned}, failures(y))
	require.True(t, operator.VerifyAudit(y, true).OK, "allowed as a warning")

	// A row removed from the middle: the next one no longer links.
	y = clone(t, exp)
	y.AuditLog = append(y.AuditLog[:1], y.AuditLog[2:]...)
	got = failures(y)
	require.Contains(t, got[0], "seq 3 (id 3): seq 3 where 2 was expected")
	require.Contains(t, got[0], "its prev_hash is not the hash of the row before it")
	require.Contains(t, strings.Join(got, "\n"), "has no audit row", "bob's enrollment signature lost its row")
}
