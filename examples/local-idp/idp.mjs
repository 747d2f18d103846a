// A local identity provider for trying the gateway's per-caller credentials, sign-in and approvals on
// your machine (docs/credentials-on-your-machine.md). It is npm oidc-provider, from this repository's
// node_modules (`npm ci`), configured for that walkthrough:
//
//   node examples/local-idp/idp.mjs [PORT]   http://127.0.0.1:9400 (the walkthrough's files name 9400)
//
// - Two people, alice (role "engineer") and bob (role "reviewer"). Any password signs them in:
//   oidc-provider's development login and consent pages. The role is in their ID tokens (the
//   gateway judges approvers signed in to its pages by them) and in their access tokens.
// - Access tokens are JWTs for a resource indicator (RFC 8707): ask for `resource=URL` and the token's
//   `aud` is that URL. The gateway and the two MCP servers of the walkthrough are resources.
// - Clients: `cli` (a person's MCP client: authorization code + PKCE, no secret), `gateway` (signs
//   people in to the gateway's pages; exchanges callers' tokens, RFC 8693; its own tokens for the
//   servers, client credentials) and `journal-gateway` (the gateway as the client of the journal
//   server's authorization server, for connected accounts: this same IdP plays that part here).
//
// Not for production: anyone signs in as anyone, the signing key is made at each start (a restart
// signs everybody out), and nothing is stored.

import { generateKeyPairSync, verify } from 'node:crypto';
import Provider, { errors } from 'oidc-provider';

const port = Number(process.argv[2] ?? 9400);
const issuer = `http://127.0.0.1:${port}`;

// The resources: where each token may be used (its `aud`), and the scopes it may carry.
const GATEWAY = 'http://127.0.0.1:9401/mcp';
const RESOURCES = {
  [GATEWAY]: { scope: 'mcp' },
  'http://127.0.0.1:9402/mcp': { scope: 'notes:read notes:write' }, // the notes server
  'http://127.0.0.1:9403/mcp': { scope: 'journal:read journal:write' }, // the journal server
};

// What oidc-provider needs to know of a resource: a JWT access token whose `aud` is its URL, for an hour.
function resourceServer(resource) {
  if (!RESOURCES[resource]) throw new errors.InvalidTarget(`unknown resource ${resource}`);
  return {
    audience: resource, scope: RESOURCES[resource].scope, identifier: () => resource,
    accessTokenFormat: 'jwt', accessTokenTTL: 3600, jwt: { sign: { alg: 'RS256' } },
  };
}

const PEOPLE = { alice: { role: 'engineer' }, bob: { role: 'reviewer' } };

const TOKEN_EXCHANGE = 'urn:ietf:params:oauth:grant-type:token-exchange';
const ACCESS_TOKEN = 'urn:ietf:params:oauth:token-type:access_token';

// One RSA key, made now: its public half is what the gateway and the servers verify tokens with.
const { privateKey, publicKey } = generateKeyPairSync('rsa', { modulusLength: 2048 });
const KEY = { ...privateKey.export({ format: 'jwk' }), kid: 'local', alg: 'RS256', use: 'sig' };

// The gateway's redirect URIs are on 127.0.0.1, so its clients are `native` (RFC 8252: loopback).
const provider = new Provider(issuer, {
  clients: [
    {
      client_id: 'cli',
      token_endpoint_auth_method: 'none', // a public client: PKCE is its proof
      application_type: 'native',
      grant_types: ['authorization_code'],
      response_types: ['code'],
      redirect_uris: ['http://127.0.0.1/callback'],
    },
    {
      client_id: 'gateway',
      client_secret: 'gateway-secret',
      application_type: 'native',
      grant_types: ['authorization_code', 'client_credentials', TOKEN_EXCHANGE],
      response_types: ['code'],
      redirect_uris: ['http://127.0.0.1:9401/connect/callback', 'http://127.0.0.1:9401/approvals/callback'],
    },
    {
      client_id: 'journal-gateway',
      client_secret: 'journal-secret',
      application_type: 'native',
      grant_types: ['authorization_code', 'refresh_token'],
      response_types: ['code'],
      redirect_uris: ['http://127.0.0.1:9401/oauth/callback'],
    },
  ],
  jwks: { keys: [KEY] },
  scopes: ['openid', 'offline_access', ...new Set(Object.values(RESOURCES).flatMap((r) => r.scope.split(' ')))],
  pkce: { required: () => true },
  issueRefreshToken: async (_ctx, client) => client.grantTypeAllowed('refresh_token'),
  features: {
    devInteractions: { enabled: true }, // the login page takes any name and password
    clientCredentials: { enabled: true },
    resourceIndicators: {
      enabled: true,
      defaultResource: async () => undefined,
      useGrantedResource: async () => true,
      getResourceServerInfo: async (_ctx, resource) => resourceServer(resource),
    },
  },
  findAccount: async (_ctx, id) => ({ accountId: id, claims: async () => ({ sub: id, ...PEOPLE[id] }) }),
  claims: { openid: ['sub', 'role'] },
  conformIdTokenClaims: false, // the role goes in the ID token itself, not only in userinfo
  extraTokenClaims: async (_ctx, token) => PEOPLE[token.accountId],
});

// -- RFC 8693 token exchange: the gateway trades a caller's token for one issued to a server ---------
// oidc-provider has no token exchange of its own; it lets an application register a grant. This one
// accepts a subject token this IdP signed for the gateway, still valid, from the `gateway` client,
// and answers with an access token for the requested resource, for the same person.

function verifiedClaims(token) {
  const [header, payload, signature, ...rest] = token.split('.');
  if (!signature || rest.length) return undefined;
  const signed = verify('sha256', Buffer.from(`${header}.${payload}`), publicKey,
    Buffer.from(signature, 'base64url'));
  if (!signed) return undefined; // (an RS256 signature: the only kind this key makes)
  const claims = JSON.parse(Buffer.from(payload, 'base64url').toString());
  return claims.iss === issuer && claims.exp > Date.now() / 1000 ? claims : undefined;
}

provider.registerGrantType(TOKEN_EXCHANGE, async (ctx) => {
  const { params, client } = ctx.oidc;
  if (client.clientId !== 'gateway') throw new errors.UnauthorizedClient('only the gateway exchanges');
  if (params.subject_token_type !== ACCESS_TOKEN) throw new errors.InvalidRequest('subject_token_type');
  const subject = verifiedClaims(params.subject_token ?? '');
  if (!subject || subject.aud !== GATEWAY) throw new errors.InvalidGrant('subject_token is not valid here');
  const resource = params.resource ?? params.audience;
  const target = resourceServer(resource);
  const allowed = new Set(target.scope.split(' '));
  const scope = (params.scope ?? '').split(' ').filter((s) => allowed.has(s)).join(' ');
  const token = new provider.AccessToken({
    accountId: subject.sub, client, scope: scope || undefined, gty: TOKEN_EXCHANGE, resourceServer: target,
  });
  ctx.body = { access_token: await token.save(), issued_token_type: ACCESS_TOKEN, token_type: 'Bearer',
    expires_in: token.expiration, ...(scope ? { scope } : {}) };
  console.log(`exchanged ${subject.sub}'s token for the gateway for one for ${resource}`);
}, ['subject_token', 'subject_token_type', 'requested_token_type', 'resource', 'audience', 'scope'],
['resource', 'audience']);

provider.listen(port, '127.0.0.1', () => {
  console.log(`ready ${issuer} (people: ${Object.keys(PEOPLE).join(', ')}; any password)`);
});
