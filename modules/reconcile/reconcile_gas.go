package reconcile

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/uptrace/bun"

	"svc/modules/alert"
	"svc/platform/chain"
	"svc/platform/db"
	"svc/platform/money"
)

// CheckGas reads the hot wallet's TRX and opens a gas_low episode, with
// one alert, when it is below the threshold, or ends the open one when it
// is not.
func (s *Service) CheckGas(ctx context.Context) error {
	if s.Tron == nil || s.Config.HotWallet == "" {
		return nil
	}
	addr, err := chain.ParseTronAddress(s.Config.HotWallet)
	if err != nil {
		return fmt.Errorf("TRON_HOT_WALLET: %w", err)
	}
	timeout := s.Config.SourceTimeout
	if timeout <= 0 {
		timeout = 15 * time.Second
	}
	rctx, cancel := context.WithTimeout(ctx, timeout)
	sun, err := s.Tron.TRXBalance(rctx, addr)
	cancel()
	if err != nil {
		return fmt.Errorf("read the hot wallet's TRX: %w", err)
	}
	now := s.now()
	trx := trxOf(sun)
	return db.RunInTx(ctx, s.DB, func(ctx context.Context, tx bun.Tx) error {
		if sun >= s.Config.TRXAlertThreshold {
			_, err := tx.NewUpdate().Model((*Episode)(nil)).Set("ended_at = ?", now).
				Where("kind = ? AND ended_at IS NULL", KindGasLow).Exec(ctx)
			return err
		}
		detail := fmt.Sprintf("the hot wallet %s has %s TRX, below TRX_ALERT_THRESHOLD (%s TRX): USDT withdrawals cannot pay their gas; top it up",
			addr, trx, trxOf(s.Config.TRXAlertThreshold))
		ep := Episode{Kind: KindGasLow, Asset: "TRX", StartedAt: now, Detail: detail}
		err := tx.NewInsert().Model(&ep).ExcludeColumn("id").On("CONFLICT (kind, asset) WHERE ended_at IS NULL DO NOTHING").
			Returning("id").Scan(ctx)
		if db.IsNoRows(err) || (err == nil && s.Alerts == nil) {
			return nil // an episode is open already
		}
		if err != nil {
			return fmt.Errorf("open the gas episode: %w", err)
		}
		_, _, err = s.Alerts.Raise(ctx, tx, alert.Params{Type: AlertGasLow, Subject: fmt.Sprintf("TRX:episode-%d", ep.ID), Detail: detail})
		return err
	})
}

// trxOf renders sun as TRX without trailing zeros ("150", "0.5").
func trxOf(sun int64) string {
	t := money.Format(sun, 6)
	if strings.Contains(t, ".") {
		t = strings.TrimRight(strings.TrimRight(t, "0"), ".")
	}
	return t
}
