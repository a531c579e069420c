package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"svc/modules/operator"
	"svc/platform/dbtest"
)

// TestAdminAuditVerify: a trail of signed rows verifies; an unsigned row
// of a signed action fails it (a warning with --allow-unsigned); the
// export verifies with no database, and fails naming the row once one
// byte of it is changed; a row changed in the database by its owner, with
// the append-only trigger off, fails naming it; an operator inserted by
// hand fails it.
func TestAdminAuditVerify(t *testing.T) {
	d := adminDB(t)
	ctx := context.Background()
	dir := t.TempDir()
	alice, _ := keygen(t, dir, "alice")
	_, bobPub := keygen(t, dir, "bob")

	out, err := run(t, "admin", "audit", "verify")
	require.NoError(t, err, out)
	require.Contains(t, out, "checked 0 audit rows", "an empty trail verifies")

	out, err = run(t, "admin", "operators", "init", "--name", "alice", "--key", alice)
	require.NoError(t, err, out)
	out, err = run(t, "admin", "operators", "enroll", "--name", "bob", "--role", "approver", "--public-key", bobPub.PublicKey, "--key", alice)
	require.NoError(t, err, out)
	// An action that is not signed: any actor.
	out, err = run(t, "admin", "liabilities", "snapshot")
	require.NoError(t, err, out)

	out, err = run(t, "admin", "audit", "verify")
	require.NoError(t, err, out)
	require.Contains(t, out, "checked 2 audit rows (2 signed, 0 unsigned of signed actions) and 2 enrollment records")
	require.Contains(t, out, "verified: ")
	require.Contains(t, out, "trail head: seq 2 hash ")

	// An unsigned apikey.mint: what OPERATOR_SIGNATURES=off records for a
	// mint over an admin API key, or a row the runtime role inserts by hand
	// (the CLI always signs a mint).
	_, err = d.Bun.ExecContext(ctx, `INSERT INTO audit_log (at, actor, actor_label, action, target, request_digest, detail)
		VALUES (now(), 'key_handmade', 'ops', 'apikey.mint', 'key_handmade', repeat('0', 64), '{}')`)
	require.NoError(t, err)
	out, err = run(t, "admin", "audit", "verify")
	require.ErrorIs(t, err, errAuditUnverified, out)
	require.Contains(t, out, "FAILED seq 3 (id 3): apikey.mint of key_")
	require.Contains(t, out, operator.Unsigned)
	out, err = run(t, "admin", "audit", "verify", "--allow-unsigned", "--json")
	require.NoError(t, err, out)
	var rep operator.AuditReport
	require.NoError(t, json.Unmarshal([]byte(out), &rep), out)
	require.True(t, rep.OK)
	require.Equal(t, 3, rep.Rows)
	require.Len(t, rep.Warnings, 1)
	require.EqualValues(t, 3, rep.Warnings[0].Seq)
	require.Empty(t, rep.Failures)
	require.NotEmpty(t, rep.ChainHead)

	// The export, verified without a database.
	file := filepath.Join(dir, "audit.json")
	out, err = run(t, "admin", "audit", "export", "--out", file)
	require.NoError(t, err, out)
	require.Contains(t, out, "wrote 3 audit rows and 2 enrollment records to "+file)
	_, err = run(t, "admin", "audit", "export", "--out", file)
	require.ErrorIs(t, err, os.ErrExist, "an export is never overwritten")
	raw, err := os.ReadFile(file)
	require.NoError(t, err)

	dbURL := os.Getenv("DATABASE_URL")
	t.Setenv("DATABASE_URL", "")
	out, err = run(t, "admin", "audit", "verify", "--file", file, "--allow-unsigned")
	require.NoError(t, err, out)
	require.Contains(t, out, "verified: ")
	require.Contains(t, out, fmt.Sprintf("trail head: seq 3 hash %s", rep.HeadHash), "the database's head")
	out, err = runIn(t, string(raw), "admin", "audit", "verify", "--file", "-", "--allow-unsigned")
	require.NoError(t, err, out)
	out, err = run(t, "admin", "audit", "verify", "--file", file)
	require.ErrorIs(t, err, errAuditUnverified, out)
	require.Contains(t, out, "FAILED seq 3 (id 3)")

	// One byte of the export changed: alice's name in the second row's
	// actor_label.
	label := []byte(`"actor_label":"alice"`)
	i := bytes.LastIndex(raw, label)
	require.Greater(t, i, 0)
	bad := bytes.Clone(raw)
	bad[i+len(label)-2] = 'E' // "alicE"
	badFile := filepath.Join(dir, "bad.json")
	require.NoError(t, os.WriteFile(badFile, bad, 0o600))
	out, err = run(t, "admin", "audit", "verify", "--file", badFile, "--allow-unsigned")
	require.ErrorIs(t, err, errAuditUnverified, out)
	require.Contains(t, out, "FAILED seq 2 (id 2): its actor_label is not the actor_label its hash covers")
	require.Contains(t, out, "NOT VERIFIED: 1 failure(s)")
	// And one byte of the hashed text itself.
	canon := []byte(`\"key_handmade\"`)
	require.True(t, bytes.Contains(raw, canon), "the mint row's canonical text names its actor")
	bad = bytes.Replace(raw, canon, []byte(`\"key_handmadE\"`), 1)
	require.NoError(t, os.WriteFile(badFile, bad, 0o600))
	out, err = run(t, "admin", "audit", "verify", "--file", badFile, "--allow-unsigned")
	require.ErrorIs(t, err, errAuditUnverified, out)
	require.Contains(t, out, "FAILED seq 3 (id 3): its hash does not match its contents")

	// A row changed by the schema owner with the append-only trigger off.
	t.Setenv("DATABASE_URL", dbURL)
	owner, err := pgx.Connect(ctx, dbtest.OwnerURL(dbURL))
	require.NoError(t, err)
	defer owner.Close(ctx)
	for _, q := range []string{
		"ALTER TABLE audit_log DISABLE TRIGGER audit_log_append_only",
		"UPDATE audit_log SET actor_label = 'alicE' WHERE seq = 1",
		"ALTER TABLE audit_log ENABLE TRIGGER audit_log_append_only",
	} {
		_, err = owner.Exec(ctx, q)
		require.NoError(t, err, q)
	}
	out, err = run(t, "admin", "audit", "verify", "--allow-unsigned")
	require.ErrorIs(t, err, errAuditUnverified, out)
	require.Contains(t, out, "FAILED seq 1 (id 1): its hash does not match its contents: the row was changed after it was recorded")
	require.Equal(t, 1, strings.Count(out, "FAILED"), out)

	// An operator inserted by hand, as the runtime role.
	_, err = d.Pool.Exec(ctx, "INSERT INTO operators (name, role, enrolled_seq) VALUES ('mallory', 'admin', 1)")
	require.NoError(t, err)
	out, err = run(t, "admin", "audit", "verify", "--allow-unsigned")
	require.ErrorIs(t, err, errAuditUnverified, out)
	require.Contains(t, out, `FAILED operators: operator "mallory" is not enrolled by the chain (inserted by hand?)`)
}
