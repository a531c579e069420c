package app

import (
	"context"
	"crypto/ed25519"
	"fmt"

	"github.com/riverqueue/river"

	"svc/modules/ledger"
	"svc/platform/background"
)

// ledgerArea holds the ledger's HTTP API. The ledger's posting functions
// are package functions (ledger.Post, ledger.CreditDeposit, ...) that other
// areas call inside their own transactions; they need no wiring.
type ledgerArea struct {
	LedgerAPI *ledger.API
	// Checkpointer seals the ledger (docs/checkpoints.md).
	Checkpointer *ledger.Checkpointer
}

func (a *App) initLedger(context.Context) error {
	a.LedgerAPI = &ledger.API{DB: a.DB.Bun, Now: a.Clock.Now}
	key, err := a.Cfg.Ledger.CheckpointKey()
	if err != nil {
		return fmt.Errorf("LEDGER_CHECKPOINT_SIGNING_KEY: %w", err)
	}
	a.Checkpointer = &ledger.Checkpointer{DB: a.DB.Bun, Key: key, Now: a.Clock.Now, Log: a.Log, Nice: background.Nice}
	return nil
}

// routesLedger registers GET /v1/users/{external_user_id}/balances and
// /transactions, GET /v1/admin/ledger/checkpoints/key, and the operator
// bookings POST /v1/admin/ledger/corrections and /transfers, signed by
// admins (a.Operators).
func (a *App) routesLedger(r Routers) {
	a.LedgerAPI.Routes(r.Checked(r.Platform))
	a.LedgerAPI.AdminRoutes(r.Checked(r.Admin), r.Idem, a.Operators)
	a.Checkpointer.AdminRoutes(r.Checked(r.Admin))
}

// jobsLedger adds the checkpoint and the scheduled verification of the
// checkpoints (ledger.Verifier: a slice at a time, alerting on a
// mismatch), both every LEDGER_CHECKPOINT_INTERVAL. The
// ledger check runs inside the hourly reconciliation (ledger.CheckIncremental,
// and the full check every LEDGER_FULL_CHECK_INTERVAL) and on demand (svc
// admin ledger check, full unless --incremental).
func (a *App) jobsLedger(j *Jobs) error {
	river.AddWorker(j.Workers, &ledger.CheckpointWorker{Service: a.Checkpointer})
	j.AddPeriodic(a.Cfg.Ledger.CheckpointInterval, ledger.CheckpointArgs{})
	var pub ed25519.PublicKey
	if a.Checkpointer.Key != nil {
		pub = a.Checkpointer.Key.Public().(ed25519.PublicKey)
	}
	river.AddWorker(j.Workers, &ledger.VerifyWorker{Verifier: &ledger.Verifier{DB: a.DB.Bun, Pub: pub, Alerts: a.Alerts, Log: a.Log}})
	j.AddPeriodic(a.Cfg.Ledger.CheckpointInterval, ledger.VerifyArgs{})
	return nil
}
