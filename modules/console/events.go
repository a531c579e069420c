package console

import (
	"context"
	"fmt"
	"net/http"

	"github.com/google/uuid"
	"github.com/uptrace/bun"

	"svc/modules/event"
	"svc/modules/operator"
	"svc/platform/db"
)

// The events page lists the dead events, each with its last error and its
// endpoint deliveries, as GET /v1/admin/events?status=dead lists them
// (event.Service.Records), and the dead deliveries to webhook endpoints,
// as GET /v1/admin/webhook-deliveries?status=dead lists them
// (event.EndpointService.ListDeliveries). Each
// dead delivery has a Redeliver button: the redelivery is the service's
// (RedeliverTx, RedeliverEndpointTx), signed with the operator's passkey
// (RedeliverExpect, RedeliverEndpointExpect) like POST
// /v1/admin/events/{id}/redeliver with its signature header.

// eventsListed is how many events each list of the page reads (the
// service's most).
const eventsListed = 200

type eventsPage struct {
	Dead       []event.Record
	Deliveries []deliveryRow // dead deliveries to webhook endpoints
}

// deliveryRow is a dead delivery to a webhook endpoint.
type deliveryRow = event.DeliveryListItem

func (s *Server) handleEvents(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	dead, err := s.opts.Events.Records(ctx, event.ListParams{Status: event.StatusDead, Limit: eventsListed})
	if err != nil {
		s.unreadable(w, r, "events", err)
		return
	}
	deliveries, err := s.opts.Endpoints.ListDeliveries(ctx, event.DeliveryListParams{Status: event.StatusDead, Limit: eventsListed})
	if err != nil {
		s.unreadable(w, r, "events", err)
		return
	}
	p := eventsPage{Dead: dead, Deliveries: deliveries}
	s.render(w, r, http.StatusOK, "events.html", page{Title: "Events", Data: p})
}

// redelivery is the redelivery of the event the path names, or with
// endpoint_id of its delivery to that endpoint (pages.go's action).
func (s *Server) redelivery(w http.ResponseWriter, r *http.Request, get func(string) string) *signedPage {
	id, err := event.ParseID(r.PathValue("id"))
	if err != nil {
		s.fail(w, r, http.StatusNotFound, "There is no such event.")
		return nil
	}
	e, err := s.opts.Events.Get(r.Context(), id)
	if err != nil {
		s.refused(w, r, err)
		return nil
	}
	endpoint := uuid.Nil
	a := &signedPage{Heading: "Redeliver event " + e.PublicID(), Button: "Redeliver with passkey", Back: "/events", Expect: event.RedeliverExpect(e)}
	if v := get("endpoint_id"); v != "" {
		if endpoint, err = uuid.Parse(v); err != nil {
			s.fail(w, r, http.StatusNotFound, "There is no such webhook endpoint.")
			return nil
		}
		a.Heading += " to endpoint " + endpoint.String()
		a.Hidden = []hidden{{"endpoint_id", endpoint.String()}}
		a.Expect = event.RedeliverEndpointExpect(e, endpoint)
	}
	a.Run = func(ctx context.Context, env *operator.Envelope) (string, error) {
		err := db.RunInTx(ctx, s.opts.DB, func(ctx context.Context, tx bun.Tx) error {
			if endpoint == uuid.Nil {
				_, err := s.opts.Events.RedeliverTx(ctx, tx, id, zeroActor, env)
				return err
			}
			_, _, err := s.opts.Events.RedeliverEndpointTx(ctx, tx, id, endpoint, zeroActor, env)
			return err
		})
		return fmt.Sprintf("Event %s is queued for redelivery.", e.PublicID()), err
	}
	return a
}

// unreadable answers a page whose service could not be read.
func (s *Server) unreadable(w http.ResponseWriter, r *http.Request, what string, err error) {
	s.opts.Log.Error("console: read "+what, "error", err)
	s.fail(w, r, http.StatusServiceUnavailable, "The "+what+" cannot be read now; try again.")
}
