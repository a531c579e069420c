package reconcile

import (
	"context"
	"fmt"

	"svc/modules/alert"
	"svc/modules/asset"
	"svc/modules/liabilities"
)

// AlertLiabilitiesMismatch: an asset's published liabilities total is not
// what the ledger owed its users and platform accounts at the snapshot the
// tree was read on.
const AlertLiabilitiesMismatch = "reconciliation.liabilities_mismatch"

// checkLiabilities compares each asset's latest published liabilities
// total with what the ledger owed its users and platform accounts (every
// owned balance: available + held + reserved, the accounts the tree's
// leaves sum) at the ledger snapshot it was read on
// (liabilities.ObligationsAt). The database
// refuses to publish a total that differs (liabilities_record_snapshot),
// so a difference means the published row, or the postings it summed,
// were written around the service: each one is a line of the report and
// an operator alert (one per snapshot) added to rep.
func (s *Service) checkLiabilities(ctx context.Context, assets []asset.Asset, published map[string]liabilities.Published, rep *Report) error {
	if s.Liabilities == nil || len(published) == 0 {
		return nil
	}
	ids := make([]int64, 0, len(published))
	for _, p := range published {
		ids = append(ids, p.ID)
	}
	owed, err := s.Liabilities.ObligationsAt(ctx, ids)
	if err != nil {
		return err
	}
	for _, a := range assets {
		p, ok := published[a.Code]
		if !ok {
			continue
		}
		at, ok := owed[p.ID]
		if !ok || at == p.Total {
			continue
		}
		msg := fmt.Sprintf("%s: the published liabilities total %s (snapshot %d) is not the %s the ledger owed its users at that snapshot",
			a.Code, a.Format(p.Total), p.ID, a.Format(at))
		rep.Alerts = append(rep.Alerts, msg)
		if s.Alerts != nil {
			if _, _, err := s.Alerts.Raise(ctx, s.DB, alert.Params{Type: AlertLiabilitiesMismatch, Subject: fmt.Sprintf("%s:snapshot-%d", a.Code, p.ID),
				Detail: msg + ". The service never publishes such a total (the database checks it against the balances of the same snapshot): " +
					"the snapshot's row or the ledger's postings were written around it. Do not publish this root; run svc admin ledger check and find out who wrote it (docs/provable-custody.md)."}); err != nil {
				return err
			}
		}
	}
	return nil
}
