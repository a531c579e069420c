package btcpay

import (
	"context"
	"errors"
	"net/url"
	"strconv"
)

// InvoiceStatus is BTCPay's invoice status.
type InvoiceStatus string

// Invoice statuses (BTCPay's InvoiceStatus enum).
const (
	InvoiceNew        InvoiceStatus = "New"
	InvoiceProcessing InvoiceStatus = "Processing"
	InvoiceExpired    InvoiceStatus = "Expired"
	InvoiceInvalid    InvoiceStatus = "Invalid"
	InvoiceSettled    InvoiceStatus = "Settled"
)

// AdditionalStatus says why an invoice is in its status.
type AdditionalStatus string

// Additional statuses (BTCPay's InvoiceAdditionalStatus enum).
const (
	AdditionalNone        AdditionalStatus = "None"
	AdditionalPaidLate    AdditionalStatus = "PaidLate"
	AdditionalPaidPartial AdditionalStatus = "PaidPartial"
	AdditionalMarked      AdditionalStatus = "Marked"
	AdditionalInvalid     AdditionalStatus = "Invalid"
	AdditionalPaidOver    AdditionalStatus = "PaidOver"
)

// PaymentStatus is the status of one payment to an invoice.
type PaymentStatus string

// Payment statuses. Invalid means unaccounted (replaced or double spent).
const (
	PaymentInvalid    PaymentStatus = "Invalid"
	PaymentProcessing PaymentStatus = "Processing"
	PaymentSettled    PaymentStatus = "Settled"
)

// Speed policies: the confirmations BTCPay waits for before settling.
const (
	SpeedHigh       = "HighSpeed"
	SpeedMedium     = "MediumSpeed"
	SpeedLowMedium  = "LowMediumSpeed"
	SpeedLow        = "LowSpeed"
	MetadataOrderID = "orderId" // the metadata key BTCPay indexes and filters on
)

// CreateInvoiceParams describes one deposit invoice.
type CreateInvoiceParams struct {
	// OrderID is our correlation id (the deposit id), sent as
	// metadata.orderId so the invoice can be found again after an
	// ambiguous failure.
	OrderID string
	// Amount is the invoice amount in Currency; nil makes a top-up invoice
	// that accepts any amount.
	Amount *Amount
	// Currency of the invoice, e.g. "BTC" or "USDt".
	Currency string
	// PaymentMethod is the only method the invoice offers ("BTC-CHAIN",
	// "BTC-LN", "USDT-TRON").
	PaymentMethod     string
	ExpirationMinutes int
	MonitoringMinutes int
	SpeedPolicy       string
	// Metadata is extra metadata; OrderID wins over a key of the same name.
	Metadata map[string]any
}

type createInvoiceRequest struct {
	Amount   *Amount         `json:"amount"`
	Currency string          `json:"currency,omitempty"`
	Metadata map[string]any  `json:"metadata"`
	Checkout checkoutRequest `json:"checkout"`
}

type checkoutRequest struct {
	SpeedPolicy       string   `json:"speedPolicy,omitempty"`
	PaymentMethods    []string `json:"paymentMethods,omitempty"`
	ExpirationMinutes int      `json:"expirationMinutes,omitempty"`
	MonitoringMinutes int      `json:"monitoringMinutes,omitempty"`
}

// Invoice is BTCPay's InvoiceData.
type Invoice struct {
	ID                                string             `json:"id"`
	StoreID                           string             `json:"storeId"`
	Amount                            Amount             `json:"amount"`
	PaidAmount                        *Amount            `json:"paidAmount"` // 2.2+
	Currency                          string             `json:"currency"`
	Type                              string             `json:"type"` // Standard or TopUp
	CheckoutLink                      string             `json:"checkoutLink"`
	CreatedTime                       UnixTime           `json:"createdTime"`
	ExpirationTime                    UnixTime           `json:"expirationTime"`
	MonitoringExpiration              UnixTime           `json:"monitoringExpiration"`
	Status                            InvoiceStatus      `json:"status"`
	AdditionalStatus                  AdditionalStatus   `json:"additionalStatus"`
	AvailableStatusesForManualMarking []InvoiceStatus    `json:"availableStatusesForManualMarking"`
	Archived                          bool               `json:"archived"`
	Metadata                          Metadata           `json:"metadata"`
	Checkout                          InvoiceCheckout    `json:"checkout"`
	PaymentMethods                    []InvoicePayMethod `json:"paymentMethods"` // only when asked for
}

// OrderID returns metadata.orderId.
func (i Invoice) OrderID() string { return i.Metadata.String(MetadataOrderID) }

// InvoiceCheckout is the part of the effective checkout options we read.
type InvoiceCheckout struct {
	SpeedPolicy    string   `json:"speedPolicy"`
	PaymentMethods []string `json:"paymentMethods"`
}

// InvoicePayMethod is one payment method of an invoice with its payments
// (InvoicePaymentMethodDataModel).
type InvoicePayMethod struct {
	PaymentMethodID   string    `json:"paymentMethodId"`
	Currency          string    `json:"currency"`
	Destination       string    `json:"destination"` // address, BOLT11 or TRON address
	PaymentLink       string    `json:"paymentLink"`
	Rate              Amount    `json:"rate"` // method currency -> invoice currency
	PaymentMethodPaid Amount    `json:"paymentMethodPaid"`
	TotalPaid         Amount    `json:"totalPaid"`
	Due               Amount    `json:"due"`
	Amount            Amount    `json:"amount"`
	PaymentMethodFee  Amount    `json:"paymentMethodFee"`
	Payments          []Payment `json:"payments"`
	Activated         bool      `json:"activated"`
}

// Payment is one payment to an invoice.
type Payment struct {
	// ID is "<txid>-<vout>" on chain, the payment hash for Lightning,
	// "<txhash>-<index>" for USDT on TRON.
	ID           string        `json:"id"`
	ReceivedDate UnixTime      `json:"receivedDate"`
	Value        Amount        `json:"value"` // gross, in the method's currency
	Fee          Amount        `json:"fee"`   // the method fee attributed to it
	Status       PaymentStatus `json:"status"`
	Destination  string        `json:"destination"`
}

// CreateInvoice creates an invoice. On ErrUnreachable the invoice may
// exist: look it up with InvoicesByOrderID before creating another.
func (c *Client) CreateInvoice(ctx context.Context, p CreateInvoiceParams) (Invoice, error) {
	if p.OrderID == "" {
		return Invoice{}, errors.New("btcpay create invoice: order id is required")
	}
	meta := metadataWith(p.Metadata, MetadataOrderID, p.OrderID)
	req := createInvoiceRequest{
		Amount: p.Amount, Currency: p.Currency, Metadata: meta,
		Checkout: checkoutRequest{SpeedPolicy: p.SpeedPolicy, ExpirationMinutes: p.ExpirationMinutes,
			MonitoringMinutes: p.MonitoringMinutes},
	}
	if p.PaymentMethod != "" {
		req.Checkout.PaymentMethods = []string{p.PaymentMethod}
	}
	return callFor[Invoice](ctx, c, "create invoice", "POST", c.storePath("invoices"), nil, req)
}

// GetInvoice returns one invoice; errors.Is(err, ErrNotFound) when it does
// not exist.
func (c *Client) GetInvoice(ctx context.Context, id string) (Invoice, error) {
	return callFor[Invoice](ctx, c, "get invoice", "GET", c.storePath("invoices", id), nil, nil)
}

// InvoicesByOrderID lists the store's invoices whose metadata.orderId is
// orderID, archived ones included (an empty list when there are none).
func (c *Client) InvoicesByOrderID(ctx context.Context, orderID string) ([]Invoice, error) {
	q := url.Values{"orderId": {orderID}, "includeArchived": {"true"}}
	return callFor[[]Invoice](ctx, c, "list invoices", "GET", c.storePath("invoices"), q, nil)
}

// InvoicePaymentMethods returns an invoice's payment methods with their
// payments. With onlyAccounted false, replaced and double-spent payments
// are included (status Invalid).
func (c *Client) InvoicePaymentMethods(ctx context.Context, id string, onlyAccounted bool) ([]InvoicePayMethod, error) {
	q := url.Values{"onlyAccountedPayments": {strconv.FormatBool(onlyAccounted)}}
	return callFor[[]InvoicePayMethod](ctx, c, "invoice payment methods", "GET", c.storePath("invoices", id, "payment-methods"), q, nil)
}
