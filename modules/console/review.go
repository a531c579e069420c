package console

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"strings"

	"github.com/google/uuid"

	"svc/modules/deposit"
	"svc/modules/operator"
	"svc/platform/money"
)

// The review queue page lists the deposits in review, oldest first, with
// why each is there, as svc admin deposits review reads them
// (deposit.Service.ReviewDetails). Its actions are the admin API's
// resolution (POST /v1/admin/deposits/{id}/resolve): credit (what the
// processor says the payment was worth, read by deposit.Service.Preview
// and shown in display units before signing) or dismiss, each signed
// (signed.go) with the statement deposit.ResolveExpect builds, and run by
// deposit.Service.Resolve. The confirmation's form carries a digest of
// what it showed (shownDigest); the statement is made only if it is still
// that.

// reviewRow is a deposit in review as the page lists it.
type reviewRow struct {
	deposit.ReviewDetail
	Holder string
	Open   []openPayment // the uncredited payments in review
}

// openPayment is an uncredited payment in review, with its reason.
type openPayment struct {
	ID, Amount, Reason string
}

// reviewPage is the page's data.
type reviewPage struct {
	Rows []reviewRow
	More bool
}

func (s *Server) handleReview(w http.ResponseWriter, r *http.Request) {
	ds, err := s.opts.Deposits.ReviewDetails(r.Context(), deposit.MaxReviewLimit+1)
	if err != nil {
		s.opts.Log.Error("console: read the review queue", "error", err)
		s.fail(w, r, http.StatusServiceUnavailable, "The review queue cannot be read now; try again.")
		return
	}
	var p reviewPage
	if len(ds) > deposit.MaxReviewLimit {
		ds, p.More = ds[:deposit.MaxReviewLimit], true
	}
	for _, d := range ds {
		row := reviewRow{ReviewDetail: d, Holder: holder(d.ExternalUserID, d.PlatformAccount)}
		for _, pay := range d.Payments {
			if reason, ok := d.Reasons[pay.PaymentID]; ok {
				row.Open = append(row.Open, openPayment{ID: pay.PaymentID, Amount: pay.Amount, Reason: reason})
			}
		}
		p.Rows = append(p.Rows, row)
	}
	s.render(w, r, http.StatusOK, "review.html", page{Title: "Review queue", Data: p})
}

// resolutionOf reads what the path's resolution would do (Preview), with
// the query's or form's payment_id; otherwise it answers and returns
// false.
func (s *Server) resolutionOf(w http.ResponseWriter, r *http.Request) (deposit.ResolveParams, deposit.ResolvePreview, bool) {
	action := r.PathValue("action")
	if action != deposit.ActionCredit && action != deposit.ActionDismiss {
		s.fail(w, r, http.StatusNotFound, "There is no such page.")
		return deposit.ResolveParams{}, deposit.ResolvePreview{}, false
	}
	id, err := uuid.Parse(r.PathValue("id"))
	if err != nil {
		s.fail(w, r, http.StatusNotFound, "There is no such deposit.")
		return deposit.ResolveParams{}, deposit.ResolvePreview{}, false
	}
	p := deposit.ResolveParams{DepositID: id, Action: action}
	if pid := strings.TrimSpace(r.FormValue("payment_id")); pid != "" && action == deposit.ActionCredit {
		p.PaymentID = &pid
	}
	pv, err := s.opts.Deposits.Preview(r.Context(), p)
	if err != nil {
		status, text := refusal(err)
		s.fail(w, r, status, text)
		return deposit.ResolveParams{}, deposit.ResolvePreview{}, false
	}
	return p, pv, true
}

func (s *Server) handleResolveConfirm(w http.ResponseWriter, r *http.Request) {
	p, pv, ok := s.resolutionOf(w, r)
	if !ok {
		return
	}
	d, a := pv.Deposit, pv.Asset
	user := d.ExternalUserID
	if d.PlatformAccount != "" {
		user = "platform:" + d.PlatformAccount
	}
	path := r.URL.Path
	c := confirmPage{Path: path, Back: "/review", Facts: []fact{{"confirm-holder", "User", user}}}
	if p.Action == deposit.ActionCredit {
		c.Heading, c.Button = "Credit deposit "+d.ID.String(), "Credit with passkey"
		c.Facts = append([]fact{{"confirm-amount", "Amount credited", money.Format(pv.Credit, a.Decimals) + " " + a.Code}}, c.Facts...)
		if p.PaymentID != nil {
			c.Facts = append(c.Facts, fact{"confirm-payment", "Payment", *p.PaymentID})
			c.PaymentID = *p.PaymentID
		}
		c.Warning = "The amount is what the payment processor says the payment was worth; it is credited to the user's available balance."
	} else {
		c.Heading, c.Button = "Dismiss deposit "+d.ID.String(), "Dismiss with passkey"
		c.Facts = append(c.Facts, fact{"confirm-asset", "Asset", a.Code})
		c.Warning = "Dismissing closes the review without crediting anything."
	}
	if d.ReviewReason != nil {
		c.Facts = append(c.Facts, fact{"confirm-reason", "Review reason", *d.ReviewReason})
	}
	c.Hidden = []hidden{{"shown", shownDigest(deposit.ResolveExpect(pv.Deposit, pv.Asset, p.Action, p.PaymentID, pv.Credit), pv.PaymentID)}}
	s.render(w, r, http.StatusOK, "confirm.html", page{Title: "Resolve deposit", Data: c})
}

// handleResolveChallenge makes the statement of the resolution as the
// processor values it now: what the service compares
// (deposit.ResolveExpect). It refuses (409) when that statement, or the
// payment a credit would credit, is not the one the confirmation showed
// (its form's shown field): the operator signs only what they saw.
func (s *Server) handleResolveChallenge(w http.ResponseWriter, r *http.Request) {
	p, pv, ok := s.resolutionOf(w, r)
	if !ok {
		return
	}
	x := deposit.ResolveExpect(pv.Deposit, pv.Asset, p.Action, p.PaymentID, pv.Credit)
	if got := r.PostFormValue("shown"); subtle.ConstantTimeCompare([]byte(got), []byte(shownDigest(x, pv.PaymentID))) != 1 {
		s.fail(w, r, http.StatusConflict, "This changed since you looked at it; review it again. Nothing was done.")
		return
	}
	svc := s.opts.Deposits
	s.offer(w, r, strings.TrimSuffix(r.URL.Path, "/challenge"), x,
		func(ctx context.Context, env *operator.Envelope) (string, error) {
			p.Signature = env
			res, _, err := svc.Resolve(ctx, p, nil)
			if err != nil {
				return "", err
			}
			return fmt.Sprintf("Deposit %s is %s: this resolution credited %s %s, %s in total.", res.Deposit.DepositID, res.Deposit.Status,
				res.Credited, res.Deposit.Asset, res.Deposit.AmountCredited), nil
		})
}

// shownDigest is a digest of what a confirmation shows: the statement's
// action, resource and facts, and more (the payment a credit would
// credit), each length-prefixed.
func shownDigest(x operator.Expect, more ...string) string {
	h := sha256.New()
	put := func(v string) { fmt.Fprintf(h, "%d:%s;", len(v), v) }
	put(x.Action)
	put(x.Resource)
	for _, k := range slices.Sorted(maps.Keys(x.Facts)) {
		put(k)
		put(x.Facts[k])
	}
	for _, v := range more {
		put(v)
	}
	return base64.RawURLEncoding.EncodeToString(h.Sum(nil))
}
