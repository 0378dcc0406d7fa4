/* SPDX-License-Identifier: ISC */
/*
 * effects_test.h: what test_effects*, test_effect_extend and
 * test_durable_watch share (effects_test.c): the key's kind, a request
 * and a result, a short lease, and the calls of the effect ledger over
 * the harness's connection: each request built, sent and judged (a
 * disposition, a reason, an error), the receipt as it came on the wire,
 * a lease waited on until it lapses, and a key's submission and state.
 * Each fails the running cmocka test on an answer it does not expect.
 * Included after cmocka.h, jansson.h and integration/harness.h.
 */
#ifndef IDEM_TEST_EFFECTS_TEST_H
#define IDEM_TEST_EFFECTS_TEST_H

#define KIND		"mail.send/v1"
#define REQUEST		"{\"to\":\"ops@example.com\",\"subject\":\"Hi\"}"
#define RESULT		"{\"message_id\":\"<1@example.com>\",\"n\":[1,2.5]}"
/* A lease that lapses fast, and a bound on waiting for it to. */
#define SHORT_LEASE_MS	100
#define LAPSE_WAIT_MS	5000

/* The requests (to send or to free), and each sent on b (the reply). */
json_t	*begin_request(const char *id, const char *kind,
	    const char *request_json, int64_t lease_ms);
json_t	*begin(struct broker *b, const char *id, const char *request_json,
	    int64_t lease_ms);
json_t	*complete_request(const char *id, const char *fence,
	    const char *outcome, const char *result_json);
json_t	*complete(struct broker *b, const char *id, const char *fence,
	    const char *outcome, const char *result_json);
json_t	*resolve_request(const char *id, const char *observed,
	    const char *result_json);
json_t	*resolve(struct broker *b, const char *id, const char *observed,
	    const char *result_json);
void	 assert_disposition(json_t *reply, const char *disposition);
void	 assert_reason(json_t *reply, const char *reason);
void	 assert_error(json_t *reply, const char *code, const char *field);
/* The reply's receipt as it came on the wire (its bytes, malloc'd). */
char	*wire_receipt(struct broker *b, json_t *request);
/* Poll (with the lease as the only clock) until begin says it lapsed. */
json_t	*begin_until_unknown(struct broker *b, const char *id,
	    const char *request);
/* A proceed's fence (malloc'd); fails on another disposition. */
char	*fence_of(json_t *reply);
/* get_submission's submission for the key (the reply, to free). */
json_t	*submission(struct broker *b, const char *id, json_t **reply);
void	 assert_state(struct broker *b, const char *id,
	    const char *state_name, int attempt);

#endif
