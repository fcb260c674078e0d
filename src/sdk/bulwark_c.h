/* Bulwark SDK, C ABI (libbulwark.so). Used by the Python module via ctypes.
 *
 * One process-wide client. Every call is thread-safe. Functions returning int
 * return BW_OK (0) or a negative error code (-Code from common/status.h); the
 * message of the calling thread's last error is bw_last_error(). Predicates return
 * 1/0 or a negative error. Functions other than bw_init initialise the client from
 * the environment on first use if bw_init was not called.
 */
#ifndef BULWARK_SDK_BULWARK_C_H_
#define BULWARK_SDK_BULWARK_C_H_

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

#define BW_OK 0
#define BW_ERR_INVALID_ARGUMENT (-1)
#define BW_ERR_NOT_FOUND (-2)
#define BW_ERR_ALREADY_EXISTS (-3)
#define BW_ERR_FAILED_PRECONDITION (-4)
#define BW_ERR_DATA_LOSS (-5)
#define BW_ERR_DEADLINE_EXCEEDED (-6)
#define BW_ERR_UNAVAILABLE (-7)
#define BW_ERR_INTERNAL (-8)
#define BW_ERR_ABORTED (-9)

/* Message of this thread's most recent failed call ("" if none). Valid until the
 * next bw_* call on this thread. */
const char* bw_last_error(void);

/* (Re)initialises from the environment (docs/protocol.md section 3). */
int bw_init(void);
/* Closes the agent channel; a later call re-initialises. */
int bw_shutdown(void);

int bw_rank(void);
int bw_world_size(void);
/* Committed step to resume from, -1 = fresh start (or not initialisable). */
long bw_resume_step(void);
int bw_should_checkpoint(long step);
long bw_skip_from(void);
long bw_skip_to(void);
/* 1 once per inject_nan datagram. */
int bw_poll_injected_nan(void);

int bw_report_step(long step, double loss, long long tokens);

/* Saves `n` blobs (names[i], data[i], sizes[i]) as this rank's shard of `step`. */
int bw_save(long step, size_t n, const char* const* names, const void* const* data,
            const size_t* sizes);
/* Commits `step` for all ranks (see bulwark::sdk::Client::Commit). */
int bw_commit(long step);

/* Loaded blobs; free with bw_blobs_free. */
typedef struct bw_blobs bw_blobs;
/* Loads committed `step` (-1 = resume step) into *out. */
int bw_load(long step, bw_blobs** out);
size_t bw_blobs_count(const bw_blobs* b);
const char* bw_blobs_name(const bw_blobs* b, size_t i);
const void* bw_blobs_data(const bw_blobs* b, size_t i);
size_t bw_blobs_size(const bw_blobs* b, size_t i);
void bw_blobs_free(bw_blobs* b);

/* Tensor checkpoints (python bulwark.checkpoint). Saves `n` tensors: names[i],
 * dtypes[i] ("float32", "bfloat16", "int64", "uint8", "bool", ...), ndims[i] dims
 * taken in order from the flat `shapes` array, data[i] (nbytes implied), flags[i]
 * bit 0 = replicated across data-parallel ranks. Copies into the memory tier and
 * returns (or writes the disk shard when there is no memory tier). */
int bw_ckpt_save(long step, size_t n, const char* const* names, const char* const* dtypes,
                 const int* ndims, const long long* shapes, const void* const* data,
                 const int* flags);

/* An open checkpoint step on one tier (see bulwark::sdk::Client::OpenLoad). */
typedef struct bw_reader bw_reader;
int bw_ckpt_open(long step, int min_tier, bw_reader** out);
const char* bw_load_tier(const bw_reader* l); /* "memory", "disk", "shared" */
long bw_load_step(const bw_reader* l);
size_t bw_load_count(const bw_reader* l);
const char* bw_load_name(const bw_reader* l, size_t i);
const char* bw_load_dtype(const bw_reader* l, size_t i);
int bw_load_ndim(const bw_reader* l, size_t i);
long long bw_load_dim(const bw_reader* l, size_t i, int d);
size_t bw_load_nbytes(const bw_reader* l, size_t i);
/* Reads tensor i (verified) into dst, which must hold exactly its nbytes. */
int bw_load_read(bw_reader* l, size_t i, void* dst, size_t nbytes);
void bw_load_close(bw_reader* l);

#ifdef __cplusplus
}
#endif

#endif /* BULWARK_SDK_BULWARK_C_H_ */
