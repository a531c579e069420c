package metrics_test

import (
	"context"
	"errors"
	"log/slog"
	"testing"

	"github.com/stretchr/testify/require"

	"svc/platform/metrics"
)

// TestStateProbesAreIndependent: a probe that fails reports itself down
// and leaves out only its own families; the others are reported whole.
// The events and their endpoint deliveries are two probes, so that a
// failed count of either does not hide the other's backlog.
func TestStateProbesAreIndependent(t *testing.T) {
	t.Parallel()
	for _, failing := range []string{metrics.ProbeEvents, metrics.ProbeDeliveries} {
		t.Run(failing, func(t *testing.T) {
			m := metrics.New(metrics.Options{Version: "test"})
			fail := errors.New("permission denied for table")
			m.RegisterState(metrics.State{
				Log: slog.New(slog.DiscardHandler),
				Events: func(context.Context) (metrics.EventBacklog, error) {
					if failing == metrics.ProbeEvents {
						return metrics.EventBacklog{}, fail
					}
					return metrics.EventBacklog{Pending: 3, Dead: 1}, nil
				},
				WebhookDeliveries: func(context.Context) (metrics.DeliveryBacklog, error) {
					if failing == metrics.ProbeDeliveries {
						return metrics.DeliveryBacklog{}, fail
					}
					return metrics.DeliveryBacklog{Pending: 5, Dead: 2}, nil
				},
			})
			families, err := m.Registry.Gather()
			require.NoError(t, err)
			got := map[string]float64{}
			for _, f := range families {
				for _, mt := range f.GetMetric() {
					name := f.GetName()
					for _, l := range mt.GetLabel() {
						if l.GetName() == "probe" {
							name += "{" + l.GetValue() + "}"
						}
					}
					if mt.GetGauge() != nil {
						got[name] = mt.GetGauge().GetValue()
					}
				}
			}
			events := map[string]float64{"svc_events_pending": 3, "svc_events_dead": 1}
			deliveries := map[string]float64{"svc_webhook_deliveries_pending": 5, "svc_webhook_deliveries_dead": 2}
			up, gone, other := events, deliveries, metrics.ProbeEvents
			if failing == metrics.ProbeEvents {
				up, gone, other = deliveries, events, metrics.ProbeDeliveries
			}
			require.Equal(t, 0.0, got["svc_state_up{"+failing+"}"])
			require.Equal(t, 1.0, got["svc_state_up{"+other+"}"])
			for name, v := range up {
				require.Equal(t, v, got[name], name)
			}
			for name := range gone {
				require.NotContains(t, got, name)
			}
		})
	}
}
