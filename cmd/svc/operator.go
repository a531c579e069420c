package main

import (
	"fmt"
	"os"
	"os/user"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"svc/modules/audit"
	"svc/modules/operator"
)

// KeyEnv names the operator's key file when --key is not given.
const KeyEnv = "SVC_OPERATOR_KEY"

// keyFlag adds --key, the operator's private key file, to c.
func keyFlag(c *cobra.Command, path *string) {
	c.Flags().StringVar(path, "key", "", "the operator's private key file (svc admin operators keygen), which names the operator; default $"+KeyEnv)
}

// loadKey reads the operator's key: --key, else $SVC_OPERATOR_KEY.
func loadKey(path string) (*operator.Signer, error) {
	if path == "" {
		path = os.Getenv(KeyEnv)
	}
	if path == "" {
		return nil, fmt.Errorf("--key FILE (or %s) is required: this action is signed with the operator's key (svc admin operators keygen)", KeyEnv)
	}
	return operator.LoadKeyFile(path)
}

// signWith signs x's statement, now, with the operator's key (--key or
// $SVC_OPERATOR_KEY).
func signWith(path string, x operator.Expect) (*operator.Envelope, error) {
	s, err := loadKey(path)
	if err != nil {
		return nil, err
	}
	e, err := s.Sign(operator.NewStatement(x.Action, x.Resource, x.Facts, time.Now()))
	if err != nil {
		return nil, err
	}
	return &e, nil
}

// The usages of --as: a name that defaults to the login name, and one that
// must be given (a decision, a booking, an acknowledgement).
const (
	asUsage         = "the operator's name recorded in the audit trail (default: the login name)"
	asRequiredUsage = "the operator's name, recorded as cli:NAME (required)"
)

// asFlag adds --as, the operator's name, to c.
func asFlag(c *cobra.Command, as *string, usage string) {
	c.Flags().StringVar(as, "as", "", usage)
}

// operatorName is the operator's name for the audit trail: --as, else the
// login name.
func operatorName(as string) (string, error) {
	name := strings.TrimSpace(as)
	if name == "" {
		if u, err := user.Current(); err == nil {
			name = u.Username
		}
	}
	if name == "" {
		name = os.Getenv("USER")
	}
	if name == "" {
		return "", fmt.Errorf("--as is required: name the operator")
	}
	if len(name) > 251 {
		return "", fmt.Errorf("--as: at most 251 characters")
	}
	return name, nil
}

// loginActor is the command-line operator acting (--as, default the login
// name) as the audit trail records them: "cli:NAME", also what a resolution
// records as resolved_by.
func loginActor(as string) (audit.Actor, error) {
	name, err := operatorName(as)
	if err != nil {
		return audit.Actor{}, err
	}
	return audit.CLI(name), nil
}

// requiredOperator is the operator of an --as without a default (a
// withdrawal decision, a booking): what says what is recorded as made by
// them.
func requiredOperator(as, what string) (audit.Actor, error) {
	if strings.TrimSpace(as) == "" {
		return audit.Actor{}, errAsRequired(what)
	}
	return loginActor(as)
}

// errAsRequired says that --as must name the operator of what.
func errAsRequired(what string) error {
	return fmt.Errorf("--as NAME is required: the %s is recorded as made by cli:NAME", what)
}
