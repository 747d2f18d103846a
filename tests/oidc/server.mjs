// A real OpenID Connect provider (npm oidc-provider 9.13.3) for the auth and credential tests.
// Usage: node tests/oidc/server.mjs PORT   — listens on 127.0.0.1:PORT with a fresh signing key set
// (RS256 + ES256, random kids) on every start, so a restart on the same port is a key rotation.
// Prints one line "ready <issuer>" on stdout once it listens.
//
// Besides client_credentials, introspection and revocation, it signs people in (authorization code
// with PKCE, oidc-provider's own login and consent pages, refresh tokens) and performs RFC 8693
// token exchange, a grant registered through the provider's public registerGrantType API.

import { createPublicKey, generateKeyPairSync, randomUUID, verify } from 'node:crypto';
import Provider, { errors } from 'oidc-provider';

const port = Number(process.argv[2]);
if (!Number.isInteger(port) || port <= 0) {
  console.error('usage: node server.mjs PORT');
  process.exit(2);
}
const issuer = `http://127.0.0.1:${port}`;

// Resource servers (RFC 8707 resource indicators). Each `resource` asks for one token format.
const SCOPES = 'mission:read mission:write mission:admin';
const jwtResource = (audience, scope, ttl = 600, alg = 'RS256') => ({
  audience, scope, accessTokenFormat: 'jwt', accessTokenTTL: ttl, jwt: { sign: { alg } },
});
const RESOURCES = {
  'https://mission.example/rs256': jwtResource('urn:mcp:mission-server', SCOPES),
  'https://mission.example/es256': jwtResource('urn:mcp:mission-server', SCOPES, 600, 'ES256'),
  'https://mission.example/opaque': {
    audience: 'urn:mcp:mission-server', scope: SCOPES, accessTokenFormat: 'opaque',
    accessTokenTTL: 600,
  },
  // Lives one second: a subject token that has expired by the time it is exchanged.
  'https://mission.example/short': jwtResource('urn:mcp:mission-server', SCOPES, 1),
  'https://other.example/rs256': jwtResource('urn:mcp:other-server', SCOPES),
  // The MCP servers behind a gateway (tests/fixtures/token_servers.py), each its own audience.
  'https://crm.example/mcp': jwtResource('urn:mcp:crm', 'crm:read crm:write'),
  'https://wiki.example/mcp': jwtResource('urn:mcp:wiki', 'wiki:read wiki:write'),
};

// Claims each client's tokens carry (oidc-provider's extraTokenClaims).
const CLAIMS = {
  'mission-control': {
    role: 'mission_control', roles: ['mission_control', 'engineer'], tenant: 'acme',
    realm_access: { roles: ['engineer'] }, capabilities: ['rocket.launch'],
  },
  observer: { role: 'observer', roles: ['observer'], tenant: 'globex' },
};

// People's own claims (the roles their organisation gives them): in their ID tokens and in the
// access tokens they get, as an approver is judged by them (tests/integration/test_approval_pages.py).
const PEOPLE = { tess: { role: 'treasury' }, trent: { role: 'treasury' } };

const TOKEN_EXCHANGE = 'urn:ietf:params:oauth:grant-type:token-exchange';
const ACCESS_TOKEN_TYPE = 'urn:ietf:params:oauth:token-type:access_token';
const JWT_TYPE = 'urn:ietf:params:oauth:token-type:jwt';

function client(id, scope) {
  const metadata = {
    client_id: id,
    client_secret: `${id}-secret`,
    grant_types: ['client_credentials'],
    response_types: [],
    redirect_uris: [],
    token_endpoint_auth_method: 'client_secret_basic',
  };
  if (scope) metadata.scope = scope;
  return metadata;
}

// A confidential client that signs people in at loopback redirect URIs: `native`, so that any port
// of 127.0.0.1 matches (RFC 8252 §7.3) and the tests can serve their pages on a free port.
function webClient(id, paths, grants, auth = 'client_secret_basic') {
  return {
    client_id: id,
    client_secret: `${id}-secret`,
    application_type: 'native',
    grant_types: grants,
    response_types: grants.includes('authorization_code') ? ['code'] : [],
    redirect_uris: paths.map((path) => `http://127.0.0.1${path}`),
    token_endpoint_auth_method: auth,
  };
}

function signingKeys() {
  const rsa = generateKeyPairSync('rsa', { modulusLength: 2048 }).privateKey.export({ format: 'jwk' });
  const ec = generateKeyPairSync('ec', { namedCurve: 'P-256' }).privateKey.export({ format: 'jwk' });
  return [
    { ...rsa, kid: `rsa-${randomUUID()}`, alg: 'RS256', use: 'sig' },
    { ...ec, kid: `ec-${randomUUID()}`, alg: 'ES256', use: 'sig' },
  ];
}

const KEYS = signingKeys();
const CODE = ['authorization_code', 'refresh_token'];

const provider = new Provider(issuer, {
  clients: [
    client('mission-control', SCOPES),
    client('observer', 'mission:read'),
    client('introspector', ''),
    // A client registered under a person's name: its client-credentials tokens name no `sub`
    // (opaque, introspected), and must never be taken for the person alice.
    client('alice', SCOPES),
    // The gateway: signs people in to its pages, and exchanges callers' tokens (RFC 8693).
    webClient('gateway', ['/connect/callback', '/approvals/callback'], [...CODE, TOKEN_EXCHANGE]),
    webClient('gateway-post', [], [TOKEN_EXCHANGE], 'client_secret_post'),
    // The gateway as the OAuth client of a server's own authorization server (connected accounts).
    webClient('connector', ['/oauth/callback'], CODE),
    // An application people sign in to: it gets the callers' own access tokens.
    webClient('mission-app', ['/callback'], CODE),
    // The gateway behind a TLS proxy at a public name (the client conformance driver's browser
    // resolves that name to it): signs people in to its pages there.
    {
      client_id: 'gateway-public',
      client_secret: 'gateway-public-secret',
      grant_types: CODE,
      response_types: ['code'],
      redirect_uris: ['https://conformance-test.local/connect/callback'],
      token_endpoint_auth_method: 'client_secret_basic',
    },
  ],
  scopes: ['openid', 'offline_access', ...SCOPES.split(' ')],
  jwks: { keys: KEYS },
  cookies: { keys: [randomUUID()] },
  pkce: { required: () => true },
  issueRefreshToken: async (_ctx, cl) => cl.grantTypeAllowed('refresh_token'),
  features: {
    devInteractions: { enabled: true }, // any login and password; a consent page with "Continue"
    clientCredentials: { enabled: true },
    introspection: { enabled: true, allowedPolicy: async () => true },
    revocation: { enabled: true },
    resourceIndicators: {
      enabled: true,
      defaultResource: async () => undefined,
      useGrantedResource: async () => true,
      getResourceServerInfo: async (_ctx, resource) => {
        const info = RESOURCES[resource];
        if (!info) throw new errors.InvalidTarget();
        return info;
      },
    },
  },
  extraTokenClaims: async (_ctx, token) => (token.accountId && PEOPLE[token.accountId]
    ? { ...CLAIMS[token.clientId], ...PEOPLE[token.accountId] } : CLAIMS[token.clientId]),
  findAccount: async (_ctx, id) => ({ accountId: id, claims: async () => ({ sub: id, ...PEOPLE[id] }) }),
  claims: { openid: ['sub', 'role'] },
  conformIdTokenClaims: false, // the ID token carries the person's claims, not only the userinfo
});
provider.proxy = false;

// -- RFC 8693 token exchange ------------------------------------------------------------------------
const PUBLIC_KEYS = new Map(KEYS.map(({ d, p, q, dp, dq, qi, ...pub }) => [pub.kid, pub]));

function decode(part) {
  return JSON.parse(Buffer.from(part, 'base64url').toString('utf8'));
}

// The claims of a JWT this provider signed and that has not expired; undefined for anything else.
function verifiedJwt(token) {
  const parts = token.split('.');
  if (parts.length !== 3) return undefined;
  let header;
  let claims;
  try {
    header = decode(parts[0]);
    claims = decode(parts[1]);
  } catch {
    return undefined;
  }
  const jwk = PUBLIC_KEYS.get(header.kid);
  if (!jwk || jwk.alg !== header.alg) return undefined;
  const key = createPublicKey({ key: jwk, format: 'jwk' });
  const options = header.alg === 'ES256' ? { key, dsaEncoding: 'ieee-p1363' } : key;
  const signed = Buffer.from(`${parts[0]}.${parts[1]}`);
  if (!verify('sha256', signed, options, Buffer.from(parts[2], 'base64url'))) return undefined;
  if (claims.iss !== issuer || typeof claims.exp !== 'number') return undefined;
  if (claims.exp <= Math.floor(Date.now() / 1000)) return undefined;
  return claims;
}

// Who an opaque access token of this provider was issued to; undefined when unknown or expired.
async function opaqueSubject(token) {
  const found = (await provider.AccessToken.find(token)) ?? (await provider.ClientCredentials.find(token));
  if (!found || found.isExpired) return undefined;
  return found.accountId ?? found.clientId;
}

function targetOf(params) {
  const resources = [params.resource, params.audience].flat().filter(Boolean);
  if (resources.length !== 1) {
    throw new errors.InvalidTarget('name exactly one target: one resource or one audience');
  }
  const [wanted] = resources;
  const entry = Object.entries(RESOURCES).find(([id, info]) => id === wanted || info.audience === wanted);
  if (!entry) throw new errors.InvalidTarget(`unknown target ${wanted}`);
  const [identifier, info] = entry;
  return { ...info, identifier: () => identifier };
}

async function tokenExchange(ctx) {
  const { params, client: caller } = ctx.oidc;
  if (!params.subject_token) throw new errors.InvalidRequest('missing subject_token');
  if (![ACCESS_TOKEN_TYPE, JWT_TYPE].includes(params.subject_token_type)) {
    throw new errors.InvalidRequest('unsupported subject_token_type');
  }
  if (params.requested_token_type && params.requested_token_type !== ACCESS_TOKEN_TYPE) {
    throw new errors.InvalidRequest('unsupported requested_token_type');
  }
  const claims = verifiedJwt(params.subject_token);
  const subject = claims ? claims.sub : await opaqueSubject(params.subject_token);
  if (!subject) throw new errors.InvalidGrant('subject_token is invalid or expired');

  const resourceServer = targetOf(params);
  const allowed = new Set(resourceServer.scope.split(' '));
  const scope = (params.scope ?? '').split(' ').filter((s) => allowed.has(s)).join(' ');
  const token = new provider.AccessToken({
    accountId: subject, client: caller, scope: scope || undefined, gty: TOKEN_EXCHANGE, resourceServer,
  });
  const value = await token.save();
  // One line per exchange, for the tests that count them (never the tokens).
  console.log(`exchange ${subject} ${resourceServer.identifier()}`);
  ctx.body = {
    access_token: value,
    issued_token_type: ACCESS_TOKEN_TYPE,
    token_type: 'Bearer',
    expires_in: token.expiration,
    ...(scope ? { scope } : {}),
  };
}

provider.registerGrantType(TOKEN_EXCHANGE, tokenExchange, [
  'subject_token', 'subject_token_type', 'requested_token_type', 'audience', 'resource', 'scope',
  'actor_token', 'actor_token_type',
], ['resource', 'audience']);

const server = provider.listen(port, '127.0.0.1', () => {
  console.log(`ready ${issuer}`);
});

function stop() {
  server.close(() => process.exit(0));
  setTimeout(() => process.exit(0), 2000).unref();
}
process.on('SIGTERM', stop);
process.on('SIGINT', stop);
