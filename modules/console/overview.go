package console

import "net/http"

func (s *Server) handleOverview(w http.ResponseWriter, r *http.Request) {
	s.render(w, r, http.StatusOK, "overview.html", page{Title: "Overview"})
}
