package app_test

import (
	"context"
	"crypto/ed25519"
	"encoding/base64"
	"encoding/hex"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"svc/cmd/svc/app/apptest"
	"svc/modules/alert"
	"svc/modules/ledger"
	"svc/platform/config"
	"svc/platform/dbtest"
)

// TestCheckpointKeyEndpoint: GET /v1/admin/ledger/checkpoints/key serves
// the public key of LEDGER_CHECKPOINT_SIGNING_KEY (admin scope, as
// openapi.json says: apptest validates every answer against it), and 404
// when no key is set.
func TestCheckpointKeyEndpoint(t *testing.T) {
	t.Parallel()
	seed := make([]byte, ed25519.SeedSize)
	seed[0] = 7
	e := apptest.New(t, apptest.WithConfig(func(c *config.Config) {
		c.Ledger.CheckpointSigningKey = base64.StdEncoding.EncodeToString(seed)
	}))
	r := e.AdminGet("/v1/admin/ledger/checkpoints/key")
	require.Equal(t, http.StatusOK, r.Status, string(r.Body))
	var v ledger.CheckpointKeyView
	r.JSON(t, &v)
	require.Equal(t, "ed25519", v.Algorithm)
	require.Equal(t, hex.EncodeToString(ed25519.NewKeyFromSeed(seed).Public().(ed25519.PublicKey)), v.PublicKey)
	require.NotContains(t, string(r.Body), hex.EncodeToString(seed), "never the private key")

	require.Equal(t, http.StatusForbidden, e.Get("/v1/admin/ledger/checkpoints/key").Status, "admin scope only")
	require.Equal(t, http.StatusUnprocessableEntity, e.AdminGet("/v1/admin/ledger/checkpoints/key?x=1").Status)

	unsigned := apptest.New(t)
	r = unsigned.AdminGet("/v1/admin/ledger/checkpoints/key")
	require.Equal(t, http.StatusNotFound, r.Status, string(r.Body))
}

// TestWorkerCheckpoints: the worker's periodic job seals the ledger.
func TestWorkerCheckpoints(t *testing.T) {
	t.Parallel()
	e, _ := sealedEntry(t, "deposit:test:payment:ckpt")
	ctx := context.Background()
	r, err := ledger.VerifyCheckpoints(ctx, e.App.DB.Bun, 1, nil)
	require.NoError(t, err)
	require.True(t, r.OK, "%v", r.Mismatch)
}

// TestWorkerVerifiesCheckpoints: the worker's periodic verification
// (ledger_checkpoint_verify) finds an entry changed after it was sealed and
// raises the operator alert, with no command run.
func TestWorkerVerifiesCheckpoints(t *testing.T) {
	t.Parallel()
	e, p := sealedEntry(t, "deposit:test:payment:verify")
	ctx := context.Background()
	dbtest.ExecBehindTriggers(t, e.DBURL, `UPDATE ledger_entries SET memo = 'changed' WHERE id = $1`, p.ID)
	apptest.Eventually(t, 2*time.Minute, func() bool {
		list, err := e.App.Alerts.List(ctx, alert.ListParams{})
		require.NoError(t, err)
		for _, a := range list {
			if a.Type == ledger.AlertCheckpointMismatch {
				return true
			}
		}
		return false
	}, "the worker's verification raises the alert")
}

// sealedEntry starts the app with a worker that seals the ledger every
// second, posts a deposit credit under sourceRef and waits until the
// worker has sealed its entry.
func sealedEntry(t *testing.T, sourceRef string) (*apptest.Env, ledger.Posted) {
	t.Helper()
	e := apptest.New(t, apptest.WithWorker(), apptest.WithConfig(func(c *config.Config) {
		c.Ledger.CheckpointInterval = time.Second
	}))
	ctx := context.Background()
	p, err := ledger.CreditDeposit(ctx, e.App.DB.Bun, "BTC", ledger.UserHolder("wanda"), 5_000, sourceRef, "test")
	require.NoError(t, err)
	apptest.Eventually(t, 2*time.Minute, func() bool {
		var n int
		require.NoError(t, e.App.DB.Pool.QueryRow(ctx, `SELECT count(*) FROM ledger_checkpoint_leaves() WHERE entry_id = $1`, p.ID).Scan(&n))
		return n == 1
	}, "the worker seals the entry")
	return e, p
}
