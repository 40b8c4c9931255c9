// panva's oidc-provider, a certified OpenID Provider, with its default settings where the
// issue is about them (tests/sso/test_oidc_provider.py starts it; docs/sso.md):
// - conformIdTokenClaims (on by default): with an access token, the claims of the scopes
//   (email, groups) are at the userinfo endpoint only, never in the id_token;
// - devInteractions (on by default): its own login and consent pages, posted by the test.
// Input (environment): OP_CLIENT (JSON: client_id, client_secret, redirect_uri) and
// OP_ACCOUNTS (JSON: {login: {email, email_verified, groups}}). It listens on a free port of
// 127.0.0.1 and prints one line of JSON, {"issuer": ...}, once it serves.
import http from 'node:http';
import Provider from 'oidc-provider';

const client = JSON.parse(process.env.OP_CLIENT);
const accounts = JSON.parse(process.env.OP_ACCOUNTS);

const server = http.createServer();
server.listen(0, '127.0.0.1', () => {
  const issuer = `http://127.0.0.1:${server.address().port}`;
  const provider = new Provider(issuer, {
    clients: [
      {
        client_id: client.client_id,
        client_secret: client.client_secret,
        redirect_uris: [client.redirect_uri],
        grant_types: ['authorization_code'],
        response_types: ['code'],
      },
    ],
    // The groups ride on a scope the gateway asks for (openid email profile).
    claims: {
      openid: ['sub'],
      email: ['email', 'email_verified'],
      profile: ['name', 'groups'],
    },
    async findAccount(ctx, id) {
      const account = accounts[id];
      if (!account) return undefined;
      return {
        accountId: id,
        async claims() {
          return { sub: id, ...account };
        },
      };
    },
  });
  server.on('request', provider.callback());
  process.stdout.write(`${JSON.stringify({ issuer })}\n`);
});
