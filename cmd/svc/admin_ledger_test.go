package main

import (
	"context"
	"crypto/ed25519"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"svc/modules/ledger"
	"svc/platform/dbtest"
)

// TestAdminLedgerCheckpointVerifyExport: svc admin ledger checkpoint seals
// the ledger with a signing key, verify finds it intact, export writes a
// checkpoint that svc ledger verify-export checks offline against the
// root and the public key and refuses once any entry in it is changed;
// then a posting edited as a superuser with the triggers off makes verify
// exit 1 naming the entry.
func TestAdminLedgerCheckpointVerifyExport(t *testing.T) {
	super := dbtest.AdminURL(t)
	d := adminDB(t)
	ctx := context.Background()
	seed := make([]byte, ed25519.SeedSize)
	for i := range seed {
		seed[i] = byte(i)
	}
	t.Setenv("LEDGER_CHECKPOINT_SIGNING_KEY", hex.EncodeToString(seed))
	pub := ed25519.NewKeyFromSeed(seed).Public().(ed25519.PublicKey)

	var ids []int64
	for i := range 4 {
		p, err := ledger.CreditDeposit(ctx, d.Bun, "BTC", ledger.UserHolder("alice"), int64(1000+i), fmt.Sprintf("deposit:test:payment:%d", i), "test")
		require.NoError(t, err)
		ids = append(ids, p.ID)
	}
	// Entries are sealed once the transactions older than theirs have
	// ended, on the whole (shared) server: checkpoint until all are.
	deadline := time.Now().Add(2 * time.Minute)
	for {
		out, err := run(t, "admin", "ledger", "checkpoint")
		require.NoError(t, err, out)
		var unsealed int
		require.NoError(t, d.Pool.QueryRow(ctx, `SELECT count(*) FROM ledger_entries e
  WHERE NOT EXISTS (SELECT 1 FROM ledger_checkpoint_leaves() l WHERE l.entry_id = e.id)`).Scan(&unsealed))
		if unsealed == 0 {
			break
		}
		require.True(t, time.Now().Before(deadline), "entries unsealed after 2 minutes")
		time.Sleep(20 * time.Millisecond)
	}
	out, err := run(t, "admin", "ledger", "checkpoint")
	require.NoError(t, err, out)
	require.Contains(t, out, "nothing to seal")

	out, err = run(t, "admin", "ledger", "verify")
	require.NoError(t, err, out)
	require.Contains(t, out, "checkpoints match the ledger")
	require.Contains(t, out, "signatures: checked")

	var seq int64
	require.NoError(t, d.Pool.QueryRow(ctx, `SELECT seq FROM ledger_checkpoint_leaves() WHERE entry_id = $1`, ids[1]).Scan(&seq))
	file := filepath.Join(t.TempDir(), "export.json")
	out, err = run(t, "admin", "ledger", "export", "--checkpoint", fmt.Sprint(seq), "--out", file)
	require.NoError(t, err, out)
	raw, err := os.ReadFile(file)
	require.NoError(t, err)
	var x ledger.Export
	require.NoError(t, json.Unmarshal(raw, &x))
	root := hex.EncodeToString(x.Checkpoint.Root)

	// Offline: no database, no configuration.
	t.Setenv("DATABASE_URL", "")
	out, err = run(t, "ledger", "verify-export", file, "--root", root, "--public-key", hex.EncodeToString(pub))
	require.NoError(t, err, out)
	require.Contains(t, out, fmt.Sprintf("checkpoint %d verified", seq))
	require.Contains(t, out, "signature valid")

	other, _, err := ed25519.GenerateKey(nil)
	require.NoError(t, err)
	out, err = run(t, "ledger", "verify-export", file, "--public-key", hex.EncodeToString(other))
	require.ErrorIs(t, err, errExportInvalid, out)
	out, err = run(t, "ledger", "verify-export", file, "--root", strings.Repeat("ab", 32))
	require.ErrorIs(t, err, errExportInvalid, out)

	// Any changed field of an exported entry fails.
	var doc map[string]any
	require.NoError(t, json.Unmarshal(raw, &doc))
	entries := doc["entries"].([]any)
	first := entries[0].(map[string]any)["entry"].(map[string]any)
	postings := first["postings"].([]any)
	postings[0].(map[string]any)["amount"] = json.Number("999999")
	bad, err := json.Marshal(doc)
	require.NoError(t, err)
	badFile := filepath.Join(t.TempDir(), "bad.json")
	require.NoError(t, os.WriteFile(badFile, bad, 0o600))
	out, err = run(t, "ledger", "verify-export", badFile)
	require.ErrorIs(t, err, errExportInvalid, out)
	require.Contains(t, out, fmt.Sprintf("entry %v", first["id"]))

	// A posting edited behind the triggers: verify names its entry.
	t.Setenv("DATABASE_URL", super) // ExecBehindTriggers connects as its user
	require.Equal(t, int64(1), dbtest.ExecBehindTriggers(t, d.Pool.Config().ConnString(),
		`UPDATE ledger_postings SET amount = amount - 1 WHERE id = (SELECT min(id) FROM ledger_postings WHERE entry_id = $1)`, ids[2]))
	t.Setenv("DATABASE_URL", d.Pool.Config().ConnString())
	out, err = run(t, "admin", "ledger", "verify")
	require.ErrorIs(t, err, errCheckpointMismatch, out)
	require.Contains(t, out, fmt.Sprintf("entry %d", ids[2]))
}
