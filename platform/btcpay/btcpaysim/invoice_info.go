package btcpaysim

import (
	"github.com/govalues/decimal"
)

// Invoice returns a snapshot of an invoice.
func (s *Sim) Invoice(id string) (InvoiceInfo, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	inv := s.invoices[id]
	if inv == nil {
		return InvoiceInfo{}, false
	}
	s.update(inv, s.now())
	return s.info(inv), true
}

// InvoiceByOrderID returns the newest invoice whose metadata.orderId is
// orderID.
func (s *Sim) InvoiceByOrderID(orderID string) (InvoiceInfo, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for i := len(s.invOrder) - 1; i >= 0; i-- {
		if inv := s.invoices[s.invOrder[i]]; inv.orderID() == orderID {
			s.update(inv, s.now())
			return s.info(inv), true
		}
	}
	return InvoiceInfo{}, false
}

// InvoicesByOrderID returns every invoice whose metadata.orderId is
// orderID, oldest first: a creation retried while the processor was slow
// can leave more than one.
func (s *Sim) InvoicesByOrderID(orderID string) []InvoiceInfo {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []InvoiceInfo
	for _, id := range s.invOrder {
		if inv := s.invoices[id]; inv.orderID() == orderID {
			s.update(inv, s.now())
			out = append(out, s.info(inv))
		}
	}
	return out
}

// Invoices returns snapshots of every invoice, oldest first.
func (s *Sim) Invoices() []InvoiceInfo {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]InvoiceInfo, 0, len(s.invOrder))
	for _, id := range s.invOrder {
		out = append(out, s.info(s.invoices[id]))
	}
	return out
}

func (s *Sim) info(inv *invoice) InvoiceInfo {
	pr := inv.prompts[0]
	amount := "0"
	if inv.amount != nil {
		amount = inv.amount.String()
	}
	left, _ := pr.due.Sub(inv.paid())
	if inv.amount == nil {
		left = decimal.Zero
	}
	out := InvoiceInfo{ID: inv.id, OrderID: inv.orderID(), Status: inv.status, AdditionalStatus: inv.additional,
		Currency: inv.currency, Amount: amount, Method: pr.method, Destination: pr.destination,
		Due: fmtDec(left, pr.divisibility), Expiration: inv.expiration, MonitoringExpiration: inv.monitoring}
	for _, p := range inv.prompts {
		for _, pm := range p.payments {
			out.Payments = append(out.Payments, paymentInfo(inv, pm))
		}
	}
	return out
}
