package reconcile

import (
	"context"
	"unicode/utf8"

	"svc/modules/alert"
)

// AlertOperatorsUnproven: the operators' enrollment chain does not verify,
// or the operators tables hold a row it does not prove (an operator or a
// key inserted or changed by hand).
const AlertOperatorsUnproven = "operators.unproven"

// checkOperators adds to rep each problem Operators names, and raises one
// alert per problem (its text is the alert's subject: the same problem
// found again raises nothing new). Such a row grants nothing (every
// signature is verified against the chain alone), but someone wrote it
// around the service.
func (s *Service) checkOperators(ctx context.Context, rep *Report) error {
	if s.Operators == nil {
		return nil
	}
	problems, err := s.Operators(ctx, s.DB)
	if err != nil {
		return err
	}
	for _, p := range problems {
		rep.Alerts = append(rep.Alerts, "operators: "+p)
		if s.Alerts == nil {
			continue
		}
		subject := p
		if utf8.RuneCountInString(subject) > 500 {
			subject = string([]rune(subject)[:500])
		}
		if _, _, err := s.Alerts.Raise(ctx, s.DB, alert.Params{Type: AlertOperatorsUnproven, Subject: subject,
			Detail: "operators: " + p + ". Only the enrollment chain makes an operator, and every signature is verified against it: " +
				"this row grants nothing, but it was written around the service by someone with the database's credentials. " +
				"Run svc admin audit verify, keep the database as it is, and find out who wrote it (docs/operations.md, \"Operators\")."}); err != nil {
			return err
		}
	}
	return nil
}
