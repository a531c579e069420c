package main

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"svc/modules/operator"
	"svc/platform/fault"
)

// keygen writes a key file named name in dir with svc admin operators
// keygen and returns its path and what --json printed.
func keygen(t *testing.T, dir, name string) (string, keygenResult) {
	t.Helper()
	path := filepath.Join(dir, name+".key")
	out, err := run(t, "admin", "operators", "keygen", "--out", path, "--json")
	require.NoError(t, err, out)
	var r keygenResult
	require.NoError(t, json.Unmarshal([]byte(out), &r), out)
	return path, r
}

// TestAdminOperatorsKeygen: keygen writes a file its owner alone may read,
// prints the public key and its id, and never overwrites a file. It needs
// no database.
func TestAdminOperatorsKeygen(t *testing.T) {
	t.Setenv("DATABASE_URL", "")
	dir := t.TempDir()
	path := filepath.Join(dir, "alice.key")
	out, err := run(t, "admin", "operators", "keygen", "--out", path)
	require.NoError(t, err, out)
	fi, err := os.Stat(path)
	require.NoError(t, err)
	require.Equal(t, os.FileMode(0o600), fi.Mode().Perm())
	s, err := operator.LoadKeyFile(path)
	require.NoError(t, err)
	require.Contains(t, out, "public key: "+s.Public().String())
	require.Contains(t, out, "key id:     "+s.Public().ID())

	before, err := os.ReadFile(path)
	require.NoError(t, err)
	out, err = run(t, "admin", "operators", "keygen", "--out", path)
	require.Error(t, err, out)
	require.ErrorIs(t, err, os.ErrExist)
	after, err := os.ReadFile(path)
	require.NoError(t, err)
	require.Equal(t, before, after, "the existing key is untouched")

	_, r := keygen(t, dir, "bob")
	pub, err := operator.ParsePublicKey(r.PublicKey)
	require.NoError(t, err)
	require.Equal(t, pub.ID(), r.KeyID)

	_, err = run(t, "admin", "operators", "keygen")
	require.ErrorContains(t, err, "--out FILE is required")
}

// TestAdminOperators: the first admin enrolls themselves once; while one
// admin exists their signature applies a change, once two exist a change
// waits for a second, different admin (one admin twice counts once, an
// approver cannot sign); a key is rotated (add-key, then revoke-key) and
// the last admin cannot be revoked. An operator row inserted by hand is
// listed as a discrepancy and its key signs nothing.
func TestAdminOperators(t *testing.T) {
	d := adminDB(t)
	ctx := context.Background()
	dir := t.TempDir()
	alice, _ := keygen(t, dir, "alice")
	bob, bobPub := keygen(t, dir, "bob")
	carol, carolPub := keygen(t, dir, "carol")
	_, davePub := keygen(t, dir, "dave")

	out, err := run(t, "admin", "operators", "list")
	require.NoError(t, err, out)
	require.Contains(t, out, "no operators enrolled")

	// A change needs the key: no database is opened without it.
	_, err = run(t, "admin", "operators", "enroll", "--name", "bob", "--role", "admin", "--public-key", bobPub.PublicKey)
	require.ErrorContains(t, err, "--key FILE (or SVC_OPERATOR_KEY) is required")

	out, err = run(t, "admin", "operators", "init", "--name", "alice", "--key", alice)
	require.NoError(t, err, out)
	require.Contains(t, out, "operator.init alice: applied (record 1)")
	// Init once.
	_, err = run(t, "admin", "operators", "init", "--name", "bob", "--key", bob)
	require.ErrorIs(t, err, operator.ErrInitDone)

	// One admin: one signature applies.
	out, err = run(t, "admin", "operators", "enroll", "--name", "bob", "--role", "admin", "--public-key", bobPub.PublicKey, "--key", alice)
	require.NoError(t, err, out)
	require.Contains(t, out, "applied (record 2), signed by alice")

	// Two admins: the first signature leaves it pending, the same admin
	// again counts once, the second applies it.
	enrollCarol := []string{"admin", "operators", "enroll", "--name", "carol", "--role", "approver", "--public-key", carolPub.PublicKey}
	out, err = run(t, append(enrollCarol, "--key", alice)...)
	require.NoError(t, err, out)
	require.Contains(t, out, "pending: needs 1 more admin signature(s): another admin runs the same command")
	out, err = run(t, "admin", "operators", "list")
	require.NoError(t, err, out)
	require.Contains(t, out, "pending:\n  operator.enroll carol (role approver, key "+carolPub.PublicKey+"): signed by alice, needs 1 more")
	_, err = run(t, append(enrollCarol, "--key", alice)...)
	require.ErrorIs(t, err, operator.ErrSameOperator)
	out, err = run(t, append(enrollCarol, "--key", bob, "--json")...)
	require.NoError(t, err, out)
	var res operator.Result
	require.NoError(t, json.Unmarshal([]byte(out), &res), out)
	require.Equal(t, "applied", res.Status)
	require.EqualValues(t, 3, *res.Seq)
	require.Equal(t, []string{"alice", "bob"}, res.SignedBy)

	// An approver cannot sign a change of the operators.
	_, err = run(t, "admin", "operators", "enroll", "--name", "dave", "--role", "viewer", "--public-key", davePub.PublicKey, "--key", carol)
	require.Equal(t, fault.Forbidden, fault.KindOf(err), "%v", err)
	require.ErrorContains(t, err, "operator carol is approver")

	// Rotation: alice adds a new key (two admins), then revokes the old
	// one with the new; the old one signs nothing any more.
	alice2, alice2Pub := keygen(t, dir, "alice2")
	aliceOld, err := operator.LoadKeyFile(alice)
	require.NoError(t, err)
	for i, key := range []string{alice, bob} {
		out, err = run(t, "admin", "operators", "add-key", "alice", "--public-key", alice2Pub.PublicKey, "--key", key)
		require.NoError(t, err, out)
		require.Contains(t, out, []string{"pending", "applied (record 4)"}[i])
	}
	for i, key := range []string{alice2, bob} {
		out, err = run(t, "admin", "operators", "revoke-key", "alice", aliceOld.Public().ID(), "--key", key)
		require.NoError(t, err, out)
		require.Contains(t, out, []string{"pending", "applied (record 5)"}[i])
	}
	_, err = run(t, "admin", "operators", "set-role", "carol", "viewer", "--key", alice)
	require.Equal(t, fault.Unauthenticated, fault.KindOf(err), "%v", err)
	require.ErrorContains(t, err, "is revoked")

	// Losing bob: revoked by two admins (his own signature counts); then
	// alice is the last admin and cannot be revoked.
	for _, key := range []string{alice2, bob} {
		out, err = run(t, "admin", "operators", "revoke", "bob", "--key", key)
		require.NoError(t, err, out)
	}
	require.Contains(t, out, "applied (record 6)")
	_, err = run(t, "admin", "operators", "revoke", "alice", "--key", alice2)
	require.Equal(t, fault.Forbidden, fault.KindOf(err), "%v", err)
	require.ErrorContains(t, err, "alice is the last admin")
	out, err = run(t, "admin", "operators", "set-role", "carol", "admin", "--key", alice2)
	require.NoError(t, err, out)
	require.Contains(t, out, "applied (record 7)", "one admin again: one signature")

	out, err = run(t, "admin", "operators", "list")
	require.NoError(t, err, out)
	require.NotContains(t, out, "WARNING")
	require.Contains(t, out, "a change needs 2 admin signature(s)")
	var l operator.Listing
	out, err = run(t, "admin", "operators", "list", "--json")
	require.NoError(t, err, out)
	require.NoError(t, json.Unmarshal([]byte(out), &l), out)
	require.Len(t, l.Operators, 3)
	require.Equal(t, "alice", l.Operators[0].Name)
	require.Len(t, l.Operators[0].Keys, 2)
	require.True(t, l.Operators[0].Keys[0].Revoked)
	require.True(t, l.Operators[1].Revoked, "bob")
	require.Equal(t, operator.Admin, l.Operators[2].Role, "carol")
	require.Empty(t, l.Discrepancies)

	// mallory, inserted by hand as the runtime role: listed as a
	// discrepancy, and her key signs nothing.
	mallory, malloryPub := keygen(t, dir, "mallory")
	_, err = d.Pool.Exec(ctx, "INSERT INTO operators (name, role, enrolled_seq) VALUES ('mallory', 'admin', 1)")
	require.NoError(t, err)
	_, err = d.Pool.Exec(ctx, "INSERT INTO operator_keys (key_id, operator, public_key, added_seq) VALUES ($1, 'mallory', $2, 1)",
		malloryPub.KeyID, malloryPub.PublicKey)
	require.NoError(t, err)
	out, err = run(t, "admin", "operators", "list")
	require.NoError(t, err, out)
	require.Contains(t, out, "WARNING: the operators tables disagree with the enrollment chain")
	require.Contains(t, out, `operator "mallory" is not enrolled by the chain (inserted by hand?)`)
	require.NotContains(t, strings.Split(out, "WARNING")[0], "mallory", "not in the roster")
	_, err = run(t, "admin", "operators", "set-role", "carol", "viewer", "--key", mallory)
	require.Equal(t, fault.Unauthenticated, fault.KindOf(err), "%v", err)
	require.ErrorContains(t, err, "not an enrolled operator key")
}
