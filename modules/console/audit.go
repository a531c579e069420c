package console

import (
	"net/http"
	"strconv"
	"strings"

	"svc/modules/audit"
	"svc/modules/operator"
	"svc/platform/timefmt"
)

// The audit page lists the trail as GET /v1/admin/audit does (audit.List:
// newest first, by action and by target, a page at a time) and shows each
// row's check as svc admin audit verify makes it: the trail and the
// enrollment chain are read (operator.ExportAudit) and checked
// (operator.VerifyAudit); a row with a finding is INVALID, with why; a
// signed row without one is verified; any other row is not signed. A row
// written after the check's read is shown as not checked yet.

type auditPage struct {
	Action, Target string
	Rows           []auditRow
	Next           string // the older page's query, "" on the last
	OK             bool
	Checked        int // rows the check read
	Signed         int
	Trail          []string // findings about the trail as a whole
}

type auditRow struct {
	Seq, ID                   int64
	At, Actor, Action, Target string
	Detail                    string
	Check                     string // verified, not signed, INVALID, not checked yet
	Class                     string // status-ok, muted, status-bad
	Why                       string
}

func (s *Server) handleAudit(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	q := r.URL.Query()
	p := audit.ListParams{Action: strings.TrimSpace(q.Get("action")), Target: strings.TrimSpace(q.Get("target"))}
	if c := q.Get("cursor"); c != "" {
		n, err := strconv.ParseInt(c, 10, 64)
		if err != nil {
			s.fail(w, r, http.StatusBadRequest, "The page's cursor is not a number.")
			return
		}
		p.Cursor = &n
	}
	x, err := operator.ExportAudit(ctx, s.opts.DB, s.opts.Operators.RP, s.now())
	if err != nil {
		s.unreadable(w, r, "audit trail", err)
		return
	}
	rep := operator.VerifyAudit(x, true)
	entries, next, err := audit.List(ctx, s.opts.DB, p)
	if err != nil {
		s.unreadable(w, r, "audit trail", err)
		return
	}
	why := map[int64][]string{}
	out := auditPage{Action: p.Action, Target: p.Target, OK: rep.OK, Checked: rep.Rows, Signed: rep.Signed}
	for _, f := range append(rep.Failures, rep.Warnings...) {
		if f.ID == 0 {
			out.Trail = append(out.Trail, f.String())
			continue
		}
		why[f.ID] = append(why[f.ID], f.Why)
	}
	failed := map[int64]bool{}
	for _, f := range rep.Failures {
		failed[f.ID] = true
	}
	checked := map[int64]bool{}
	for _, row := range x.AuditLog {
		checked[row.ID] = true
	}
	for _, e := range entries {
		row := auditRow{Seq: e.Seq, ID: e.ID, At: timefmt.Format(e.At), Actor: e.Actor, Action: e.Action, Target: e.Target,
			Detail: string(e.Detail), Why: strings.Join(why[e.ID], "; ")}
		signed := audit.Row{Signature: e.Signature}.Signed()
		switch {
		case !checked[e.ID]:
			row.Check, row.Class = "not checked yet", "muted"
		case failed[e.ID]:
			row.Check, row.Class = "INVALID", "status-bad"
		case signed:
			row.Check, row.Class = "verified", "status-ok"
		default:
			row.Check, row.Class = "not signed", "muted"
		}
		out.Rows = append(out.Rows, row)
	}
	if next != nil {
		v := q
		v.Set("cursor", strconv.FormatInt(*next, 10))
		out.Next = v.Encode()
	}
	s.render(w, r, http.StatusOK, "audit.html", page{Title: "Audit trail", Data: out})
}
