package console

import (
	"net/http"

	"svc/modules/liabilities"
)

// The liabilities page shows what GET /v1/admin/liabilities and svc admin
// liabilities show: each asset's latest published proof-of-liabilities
// snapshot (liabilities.Service.Latest, rendered by liabilities.Views).
// It takes no snapshot: svc admin liabilities snapshot does, and the
// hourly reconciliation.

func (s *Server) handleLiabilities(w http.ResponseWriter, r *http.Request) {
	list, err := s.opts.Liabilities.Latest(r.Context())
	if err != nil {
		s.unreadable(w, r, "liabilities", err)
		return
	}
	views, err := liabilities.Views(r.Context(), s.opts.DB, list)
	if err != nil {
		s.unreadable(w, r, "liabilities", err)
		return
	}
	s.render(w, r, http.StatusOK, "liabilities.html", page{Title: "Liabilities", Data: views})
}
