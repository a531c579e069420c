package console

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"unicode/utf8"

	"github.com/google/uuid"

	"svc/modules/audit"
	"svc/modules/operator"
	"svc/modules/withdrawal"
)

// The withdrawals page lists what waits for an operator, read as the admin
// API reads it (withdrawal.Service.AdminList and AdminViews, as GET
// /v1/admin/withdrawals): pending approval, failed (its hold kept until
// released), and stuck in submission (withdrawal.Stuck, the rule of the
// withdrawal.submission_stuck alert). Its actions are the admin API's on
// those states: approve and reject a withdrawal pending approval, release
// a failed or stuck one; each is signed (signed.go) with the statement
// withdrawal.DecisionExpect builds, and run by Service.Approve, Reject or
// Release, as POST /v1/admin/withdrawals/{id}/approve, reject and release
// run them.

// withdrawalsShown bounds each list of the page, oldest first.
const withdrawalsShown = withdrawal.MaxAdminLimit

// withdrawalRow is a withdrawal as the page lists it.
type withdrawalRow struct {
	withdrawal.AdminView
	Holder    string
	Approvers []string // who approved so far (four-eyes)
	Actions   []string // the actions this state allows
}

// withdrawalList is one list of the page.
type withdrawalList struct {
	ID, Title, Empty string
	Rows             []withdrawalRow
	More             bool
}

// withdrawalsPage is the page's data.
type withdrawalsPage struct {
	Lists []withdrawalList
}

// withdrawalActions are the signed decisions the console offers, by the
// statuses they are offered on.
var withdrawalActions = map[string]struct {
	Action string // the audit action the operator signs
	From   []withdrawal.Status
	Verb   string
}{
	"approve": {audit.WithdrawalApprove, []withdrawal.Status{withdrawal.StatusPendingApproval}, "Approve"},
	"reject":  {audit.WithdrawalReject, []withdrawal.Status{withdrawal.StatusPendingApproval}, "Reject"},
	"release": {audit.WithdrawalRelease, []withdrawal.Status{withdrawal.StatusFailed, withdrawal.StatusSubmitting}, "Release"},
}

func holder(user, platform *string) string {
	if platform != nil {
		return "platform:" + *platform
	}
	if user != nil {
		return *user
	}
	return "-"
}

func (s *Server) withdrawalRows(ctx context.Context, ws []withdrawal.Withdrawal) ([]withdrawalRow, error) {
	vs, err := s.opts.Withdrawals.AdminViews(ctx, ws)
	if err != nil {
		return nil, err
	}
	out := make([]withdrawalRow, 0, len(vs))
	for _, v := range vs {
		r := withdrawalRow{AdminView: v, Holder: holder(v.ExternalUserID, v.PlatformAccount)}
		for _, ap := range v.Approvals {
			r.Approvers = append(r.Approvers, ap.Actor)
		}
		for _, name := range []string{"approve", "reject", "release"} {
			if slices.Contains(withdrawalActions[name].From, v.Status) {
				r.Actions = append(r.Actions, name)
			}
		}
		out = append(out, r)
	}
	return out, nil
}

// readWithdrawals reads the page's three lists.
func (s *Server) readWithdrawals(ctx context.Context) (withdrawalsPage, error) {
	var p withdrawalsPage
	for _, l := range []struct {
		id, title, empty string
		status           withdrawal.Status
		keep             func(withdrawal.Withdrawal) bool
	}{
		{"pending", "Pending approval", "No withdrawal waits for approval.", withdrawal.StatusPendingApproval, nil},
		{"failed", "Failed, hold kept", "No failed withdrawal holds money.", withdrawal.StatusFailed, nil},
		{"stuck", "Stuck in submission", "No withdrawal is stuck in submission.", withdrawal.StatusSubmitting, withdrawal.Stuck},
	} {
		ws, next, err := s.opts.Withdrawals.AdminList(ctx, withdrawal.AdminListParams{Status: l.status, Limit: withdrawalsShown})
		if err != nil {
			return p, err
		}
		if l.keep != nil {
			kept := ws[:0]
			for _, w := range ws {
				if l.keep(w) {
					kept = append(kept, w)
				}
			}
			ws = kept
		}
		rows, err := s.withdrawalRows(ctx, ws)
		if err != nil {
			return p, err
		}
		p.Lists = append(p.Lists, withdrawalList{ID: l.id, Title: l.title, Empty: l.empty, Rows: rows, More: next != nil})
	}
	return p, nil
}

func (s *Server) handleWithdrawals(w http.ResponseWriter, r *http.Request) {
	p, err := s.readWithdrawals(r.Context())
	if err != nil {
		s.opts.Log.Error("console: read the withdrawals", "error", err)
		s.fail(w, r, http.StatusServiceUnavailable, "The withdrawals cannot be read now; try again.")
		return
	}
	s.render(w, r, http.StatusOK, "withdrawals.html", page{Title: "Withdrawals", Data: p})
}

// confirmPage is a signed action's confirmation page.
type confirmPage struct {
	Heading string
	Facts   []fact
	Path    string // the action's page: the form's action
	// PaymentID is a credit's payment, a hidden field of the form.
	PaymentID string
	// Hidden are more hidden fields of the form (pages.go's actions).
	Hidden []hidden
	// Field is the action's own field: "note", "reason", "attestation",
	// or "" for none.
	Field, FieldLabel, FieldHelp string
	Required                     bool
	MinLen, MaxLen               int
	Button                       string
	Back                         string
	Warning                      string
}

// hidden is a hidden field of a form.
type hidden struct{ Name, Value string }

// fact is a line of what the operator signs.
type fact struct {
	ID, Label, Value string
}

// withdrawalOf reads the path's withdrawal's admin view and its action;
// otherwise it answers and returns false.
func (s *Server) withdrawalOf(w http.ResponseWriter, r *http.Request) (withdrawal.AdminView, string, bool) {
	name := r.PathValue("action")
	if _, ok := withdrawalActions[name]; !ok {
		s.fail(w, r, http.StatusNotFound, "There is no such page.")
		return withdrawal.AdminView{}, "", false
	}
	id, err := uuid.Parse(r.PathValue("id"))
	if err != nil {
		s.fail(w, r, http.StatusNotFound, "There is no such withdrawal.")
		return withdrawal.AdminView{}, "", false
	}
	ws, err := s.opts.Withdrawals.Get(r.Context(), id)
	if err == nil {
		var vs []withdrawal.AdminView
		if vs, err = s.opts.Withdrawals.AdminViews(r.Context(), []withdrawal.Withdrawal{ws}); err == nil {
			return vs[0], name, true
		}
	}
	status, text := refusal(err)
	s.fail(w, r, status, text)
	return withdrawal.AdminView{}, "", false
}

func (s *Server) handleWithdrawalConfirm(w http.ResponseWriter, r *http.Request) {
	v, name, ok := s.withdrawalOf(w, r)
	if !ok {
		return
	}
	a := withdrawalActions[name]
	c := confirmPage{Heading: fmt.Sprintf("%s withdrawal %s", a.Verb, v.WithdrawalID), Path: r.URL.Path, Back: "/withdrawals",
		Button: a.Verb + " with passkey", Facts: []fact{
			{"confirm-amount", "Amount", v.AmountGross + " " + v.Asset},
			{"confirm-destination", "Destination", v.DestinationAddress},
			{"confirm-holder", "User", holder(v.ExternalUserID, v.PlatformAccount)},
			{"confirm-status", "Status", string(v.Status)},
		}}
	if v.ApprovalReason != nil {
		c.Facts = append(c.Facts, fact{"confirm-reason", "Approval reason", *v.ApprovalReason})
	}
	if v.FailureReason != nil {
		c.Facts = append(c.Facts, fact{"confirm-failure", "Failure reason", *v.FailureReason})
	}
	if len(v.Approvals) > 0 {
		by := make([]string, len(v.Approvals))
		for i, ap := range v.Approvals {
			by[i] = ap.Actor
		}
		c.Facts = append(c.Facts, fact{"confirm-approvals", "Approved so far by", strings.Join(by, ", ")})
	}
	switch name {
	case "approve":
		c.Field, c.FieldLabel, c.MaxLen = "note", "Note (optional, kept in the audit trail)", withdrawal.MaxNote
	case "reject":
		c.Field, c.FieldLabel, c.MaxLen = "reason", "Reason (optional, shown to the platform as failure_reason)", withdrawal.MaxNote
		c.Warning = "Rejecting returns the amount to the user's available balance at once."
	case "release":
		c.Field, c.FieldLabel, c.Required, c.MinLen, c.MaxLen = "attestation", "Attestation", true, withdrawal.MinAttestation, withdrawal.MaxAttestation
		c.FieldHelp = fmt.Sprintf("What you checked: that no payout of this withdrawal exists or can still complete (%d to %d characters). It is signed and stored on the withdrawal.",
			withdrawal.MinAttestation, withdrawal.MaxAttestation)
		c.Warning = "Releasing returns the held amount to the user's available balance."
	}
	if !slices.Contains(a.From, v.Status) {
		c.Warning = fmt.Sprintf("This withdrawal is %s: the service refuses to %s it.", v.Status, name)
	}
	s.render(w, r, http.StatusOK, "confirm.html", page{Title: a.Verb + " withdrawal", Data: c})
}

// handleWithdrawalChallenge makes the statement of the action on the
// withdrawal as it is now, with the form's field: what the service
// compares (withdrawal.DecisionExpect).
func (s *Server) handleWithdrawalChallenge(w http.ResponseWriter, r *http.Request) {
	v, name, ok := s.withdrawalOf(w, r)
	if !ok {
		return
	}
	id := uuid.MustParse(v.WithdrawalID)
	p := withdrawal.DecideParams{WithdrawalID: id}
	text := r.PostFormValue(map[string]string{"approve": "note", "reject": "reason", "release": "attestation"}[name])
	switch name {
	case "approve":
		if text != "" {
			p.Note = &text
		}
	case "reject":
		if text != "" {
			p.Reason = &text
		}
	case "release":
		if n := utf8.RuneCountInString(text); n < withdrawal.MinAttestation || n > withdrawal.MaxAttestation {
			s.fail(w, r, http.StatusUnprocessableEntity, fmt.Sprintf("The attestation must have %d to %d characters. Nothing was done.",
				withdrawal.MinAttestation, withdrawal.MaxAttestation))
			return
		}
		p.Attestation = text
	}
	svc := s.opts.Withdrawals
	s.offer(w, r, strings.TrimSuffix(r.URL.Path, "/challenge"), withdrawal.DecisionExpect(withdrawalActions[name].Action, v, p),
		func(ctx context.Context, env *operator.Envelope) (string, error) {
			p.Signature = env
			switch name {
			case "approve":
				av, _, err := svc.Approve(ctx, p, nil)
				if err != nil {
					return "", err
				}
				return approvedSentence(av), nil
			case "reject":
				rv, _, err := svc.Reject(ctx, p, nil)
				if err != nil {
					return "", err
				}
				return fmt.Sprintf("Withdrawal %s is %s: %s %s returned to %s.", rv.WithdrawalID, rv.Status, rv.AmountGross, rv.Asset,
					holder(rv.ExternalUserID, rv.PlatformAccount)), nil
			default:
				rv, _, err := svc.Release(ctx, p, nil)
				if err != nil {
					return "", err
				}
				return fmt.Sprintf("Withdrawal %s is %s: %s %s returned to %s (released by %s).", rv.WithdrawalID, rv.Status, rv.AmountGross, rv.Asset,
					holder(rv.ExternalUserID, rv.PlatformAccount), deref(rv.ReleasedBy)), nil
			}
		})
}

// approvedSentence says what an approval did, as svc admin withdrawals
// approve does.
func approvedSentence(v withdrawal.ApprovedView) string {
	switch {
	case v.ApprovalsNeeded > 0:
		return fmt.Sprintf("Withdrawal %s: the approval by %s is recorded; %d more approval by a different operator is needed (four-eyes).",
			v.WithdrawalID, v.Approvals[len(v.Approvals)-1].Actor, v.ApprovalsNeeded)
	case v.AmountToSend != nil:
		msg := fmt.Sprintf("Withdrawal %s is %s (approved by %s). Send exactly %s %s to %s", v.WithdrawalID, v.Status, deref(v.ApprovedBy),
			*v.AmountToSend, v.Asset, v.DestinationAddress)
		if v.SendFrom != nil {
			msg += " from the hot wallet " + *v.SendFrom
		}
		return msg + ", then report the transaction id with svc admin withdrawals mark-broadcast."
	}
	return fmt.Sprintf("Withdrawal %s is %s (approved by %s).", v.WithdrawalID, v.Status, deref(v.ApprovedBy))
}

func deref(s *string) string {
	if s == nil {
		return "-"
	}
	return *s
}
