// The console's script (served from the binary; the pages have no inline
// script). It signs the operator in with their passkey: it asks the
// console for the statement's challenge, has the browser ask the passkey
// for its assertion (WebAuthn), and posts the assertion back. It also
// makes a passkey (/passkeys/new) and shows its public key to enroll, and
// signs a money action (#signed-action, signed.go) the same way.
"use strict";

(function () {
  function toB64u(buf) {
    const bytes = new Uint8Array(buf);
    let s = "";
    for (let i = 0; i < bytes.length; i++) s += String.fromCharCode(bytes[i]);
    return btoa(s).replace(/\+/g, "-").replace(/\//g, "_").replace(/=+$/, "");
  }

  function fromB64u(s) {
    const b = atob(s.replace(/-/g, "+").replace(/_/g, "/"));
    const out = new Uint8Array(b.length);
    for (let i = 0; i < b.length; i++) out[i] = b.charCodeAt(i);
    return out;
  }

  // post sends body to url with the page's CSRF token and returns the
  // console's JSON answer; an error answer throws its message.
  async function post(url, csrf, body, type) {
    const res = await fetch(url, {
      method: "POST",
      credentials: "same-origin",
      headers: { "Accept": "application/json", "Content-Type": type, "X-CSRF-Token": csrf },
      body: body,
    });
    let data = {};
    try { data = await res.json(); } catch (e) { data = { error: "The console answered " + res.status + "." }; }
    if (!res.ok) throw new Error(data.error || ("The console answered " + res.status + "."));
    return data;
  }

  function postForm(url, csrf, fields) {
    return post(url, csrf, new URLSearchParams(fields).toString(), "application/x-www-form-urlencoded");
  }

  // assert has the passkey sign the console's challenge ch (a statement's,
  // user verification required) and returns its answer as the console
  // takes it.
  async function assert(ch) {
    const cred = await navigator.credentials.get({
      publicKey: {
        challenge: fromB64u(ch.challenge),
        rpId: ch.rp_id,
        timeout: ch.timeout_ms,
        userVerification: "required",
      },
    });
    const r = cred.response;
    return {
      authenticator_data: toB64u(r.authenticatorData),
      client_data_json: toB64u(r.clientDataJSON),
      signature: toB64u(r.signature),
    };
  }

  // onPasskeyForm runs ceremony(csrf, name, show) when form is submitted:
  // the button is disabled meanwhile, and what it throws is shown in the
  // element errorId.
  function onPasskeyForm(form, errorId, ceremony) {
    const errorBox = document.getElementById(errorId);
    const button = form.querySelector("button[type=submit]");
    function show(msg) {
      errorBox.textContent = msg;
      errorBox.hidden = !msg;
    }
    form.addEventListener("submit", async function (ev) {
      ev.preventDefault();
      show("");
      if (!window.PublicKeyCredential || !navigator.credentials) {
        show("This browser cannot use passkeys.");
        return;
      }
      button.disabled = true;
      try {
        // A form without its token sends none: the console refuses it.
        const csrf = form.elements.csrf ? form.elements.csrf.value : "";
        const name = form.elements.name ? form.elements.name.value.trim() : "";
        await ceremony(csrf, name, show);
      } catch (e) {
        show(e && e.message ? e.message : String(e));
      } finally {
        button.disabled = false;
      }
    });
  }

  function signIn(form) {
    const keys = document.getElementById("keys");
    const select = document.getElementById("key_id");
    onPasskeyForm(form, "sign-in-error", async function (csrf, name, show) {
      const fields = { name: name };
      if (!keys.hidden && select.value) fields.key_id = select.value;
      const ch = await postForm("/sign-in/challenge", csrf, fields);
      if (ch.choose) {
        select.replaceChildren();
        for (const id of ch.choose) {
          const o = document.createElement("option");
          o.value = id;
          o.textContent = id;
          select.appendChild(o);
        }
        keys.hidden = false;
        show("You have several passkeys: choose the one to sign in with.");
        return;
      }
      const done = await post("/sign-in", csrf, JSON.stringify(await assert(ch)), "application/json");
      window.location.assign(done.location);
    });
  }

  // makePasskey has the browser make a passkey for the console's RP ID
  // and shows its public key, as the console reads it, to be enrolled.
  function makePasskey(form) {
    const made = document.getElementById("passkey-made");
    onPasskeyForm(form, "passkey-error", async function (csrf, name) {
      made.hidden = true;
      const ch = await postForm("/passkeys/challenge", csrf, { name: name });
      const cred = await navigator.credentials.create({
        publicKey: {
          challenge: fromB64u(ch.challenge),
          rp: { id: ch.rp_id, name: "svc console" },
          user: { id: fromB64u(ch.user_id), name: name, displayName: name },
          pubKeyCredParams: [-7, -8, -35, -36, -257].map(function (alg) { return { type: "public-key", alg: alg }; }),
          authenticatorSelection: { residentKey: "required", requireResidentKey: true, userVerification: "required" },
          attestation: "none",
          timeout: ch.timeout_ms,
        },
      });
      const r = cred.response;
      const key = await post("/passkeys", csrf, JSON.stringify({
        attestation_object: toB64u(r.attestationObject),
        client_data_json: toB64u(r.clientDataJSON),
      }), "application/json");
      document.getElementById("public-key").value = key.public_key;
      document.getElementById("key-id").textContent = key.key_id;
      document.getElementById("enroll-command").textContent =
        "svc admin operators enroll --name " + name + " --role ROLE --public-key " + key.public_key + " --key ADMIN_KEY_FILE";
      document.getElementById("add-key-command").textContent =
        "svc admin operators add-key " + name + " --public-key " + key.public_key + " --key ADMIN_KEY_FILE";
      made.hidden = false;
    });
  }

  // signedAction signs the action of the confirmation page: it posts the
  // form's fields to its path + "/challenge" for the statement's
  // challenge, asks the passkey for its assertion and posts it to the
  // path; the console answers where its result is, or its refusal, shown
  // on the page.
  function signedAction(form) {
    onPasskeyForm(form, "action-error", async function (csrf) {
      const path = form.getAttribute("action");
      const fields = {};
      for (const el of form.elements) {
        if (el.name && el.name !== "csrf") fields[el.name] = el.value;
      }
      const ch = await postForm(path + "/challenge", csrf, fields);
      const done = await post(path, csrf, JSON.stringify(await assert(ch)), "application/json");
      window.location.assign(done.location);
    });
  }

  document.addEventListener("DOMContentLoaded", function () {
    const action = document.getElementById("signed-action");
    if (action) signedAction(action);
    const form = document.getElementById("sign-in");
    if (form) signIn(form);
    const passkey = document.getElementById("passkey-new");
    if (passkey) makePasskey(passkey);
  });
})();
