package ledger

import (
	"crypto/ed25519"
	"encoding/hex"

	"github.com/gofiber/fiber/v2"

	"svc/platform/fault"
)

// CheckpointKeyView is the API's CheckpointKey.
type CheckpointKeyView struct {
	Algorithm string `json:"algorithm"`  // always "ed25519"
	PublicKey string `json:"public_key"` // 32 bytes, lowercase hex
}

// ErrNoCheckpointKey: LEDGER_CHECKPOINT_SIGNING_KEY is not set.
var ErrNoCheckpointKey = fault.New(fault.NotFound, "checkpoints are not signed: LEDGER_CHECKPOINT_SIGNING_KEY is not set")

// AdminRoutes registers, on the admin router (/v1/admin, admin scope):
//
//	GET /ledger/checkpoints/key   the public key that checkpoints are signed with
//
// It is 404 when no signing key is configured.
func (c *Checkpointer) AdminRoutes(admin fiber.Router) {
	admin.Get("/ledger/checkpoints/key", c.handleKey)
}

func (c *Checkpointer) handleKey(ctx *fiber.Ctx) error {
	if len(ctx.Queries()) > 0 {
		return fault.New(fault.Invalid, "GET /v1/admin/ledger/checkpoints/key takes no query parameters")
	}
	if c.Key == nil {
		return ErrNoCheckpointKey
	}
	pub, _ := c.Key.Public().(ed25519.PublicKey)
	return ctx.JSON(CheckpointKeyView{Algorithm: "ed25519", PublicKey: hex.EncodeToString(pub)})
}
