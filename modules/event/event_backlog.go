package event

import (
	"context"
	"fmt"
	"time"
)

// Backlog is the outbound events not delivered: what the operator watches
// (svc_events_pending, svc_events_dead and the oldest pending's age).
type Backlog struct {
	Pending, Dead int64
	// OldestPending is when the oldest pending event was created; nil when
	// none is pending.
	OldestPending *time.Time
}

// EndpointBacklog is the events' deliveries to webhook endpoints not made:
// svc_webhook_deliveries_pending and svc_webhook_deliveries_dead.
type EndpointBacklog struct {
	Pending, Dead int64
}

// Backlog counts the pending and dead events. It reads only those, through
// the index on status: its cost follows the backlog, not the history of
// delivered events. The endpoint deliveries are counted apart
// (EndpointBacklog), so that either count is reported when the other
// fails.
func (s *Service) Backlog(ctx context.Context) (Backlog, error) {
	var b Backlog
	err := s.DB.NewRaw(`SELECT count(*) FILTER (WHERE status = 'pending') AS pending,
       count(*) FILTER (WHERE status = 'dead') AS dead,
       min(created_at) FILTER (WHERE status = 'pending') AS oldest_pending
  FROM outbound_events
 WHERE status IN ('pending', 'dead')`).Scan(ctx, &b.Pending, &b.Dead, &b.OldestPending)
	if err != nil {
		return Backlog{}, fmt.Errorf("event backlog: %w", err)
	}
	return b, nil
}

// EndpointBacklog counts the pending and dead endpoint deliveries, through
// their index on status.
func (s *Service) EndpointBacklog(ctx context.Context) (EndpointBacklog, error) {
	var b EndpointBacklog
	err := s.DB.NewRaw(`SELECT count(*) FILTER (WHERE status = 'pending') AS pending,
       count(*) FILTER (WHERE status = 'dead') AS dead
  FROM public.webhook_deliveries
 WHERE status IN ('pending', 'dead')`).Scan(ctx, &b.Pending, &b.Dead)
	if err != nil {
		return EndpointBacklog{}, fmt.Errorf("endpoint delivery backlog: %w", err)
	}
	return b, nil
}
