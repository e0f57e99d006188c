//! Memory pool tests: bucket choice, reuse, the byte budget, refused settings, plain
//! buffers, buffers lent out as `Vec`s, the disabled pool, and several threads sharing one
//! pool. A buffer goes home when dropped, so every test ends with nothing in use.

use rill_application::memory_pool::{
    BUCKET_SIZES, DEFAULT_TOTAL_BYTES, LARGEST_BUCKET_BYTES, MIN_TOTAL_BYTES, MemoryPool, PAGE_BYTES, PoolBuf,
    PoolError, PoolStats,
};

const KIB: usize = 1024;
const MIB: usize = 1024 * KIB;

/// The smallest budget and few free slots per bucket, so tests allocate little.
fn small_pool() -> &'static MemoryPool {
    MemoryPool::new(MIN_TOTAL_BYTES, 16).unwrap().leak()
}

#[test]
fn bucket_sizes_are_ascending_page_multiples() {
    assert_eq!(BUCKET_SIZES.len(), 28);
    assert!(BUCKET_SIZES.iter().all(|size| size.is_multiple_of(PAGE_BYTES)));
    assert!(BUCKET_SIZES.windows(2).all(|pair| pair[0] < pair[1]));
    assert_eq!((BUCKET_SIZES[0], LARGEST_BUCKET_BYTES), (4 * KIB, 512 * MIB));
}

#[test]
fn acquire_picks_the_smallest_bucket_that_fits() {
    let pool = small_pool();
    for (len, capacity) in [(0, 4 * KIB), (1, 4 * KIB), (4096, 4 * KIB), (4097, 8 * KIB), (700_000, 768 * KIB)] {
        let buf = pool.acquire(len);
        assert_eq!((buf.len(), buf.capacity()), (len, capacity), "len {len}");
        assert_eq!(pool.stats().in_use_buffers, 1);
    }
    assert_eq!((pool.stats().misses, pool.stats().in_use_buffers), (0, 0));
}

#[test]
fn the_largest_bucket_fits_exactly_and_anything_longer_misses() {
    let pool = small_pool();
    let largest = pool.acquire(LARGEST_BUCKET_BYTES);
    assert_eq!((largest.len(), largest.capacity()), (LARGEST_BUCKET_BYTES, LARGEST_BUCKET_BYTES));
    assert_eq!(pool.stats().misses, 0);
    drop(largest);

    let oversized = pool.acquire(LARGEST_BUCKET_BYTES + 1);
    assert_eq!((oversized.len(), oversized.capacity()), (LARGEST_BUCKET_BYTES + 1, LARGEST_BUCKET_BYTES + 1));
    assert_eq!(pool.stats().misses, 1);
    assert!(!oversized.is_pooled());
    drop(oversized);
    assert_eq!(pool.stats().free_buffers, 1, "the largest bucket's buffer, not the miss");
}

#[test]
fn a_released_buffer_is_reused() {
    let pool = small_pool();
    let mut first = pool.acquire(1000);
    first.fill(7);
    drop(first);
    let before = pool.stats();
    assert_eq!(before, PoolStats { allocated_bytes: 4096, in_use_buffers: 0, free_buffers: 1, hits: 0, misses: 0 });

    let second = pool.acquire(3000);
    assert_eq!((second.len(), second.capacity()), (3000, 4096));
    // Reused bytes are whatever the last user left; only the grown tail is new zeros.
    assert!(second[..1000].iter().all(|&byte| byte == 7) && second[1000..].iter().all(|&byte| byte == 0));
    let after = pool.stats();
    assert_eq!((after.hits, after.allocated_bytes, after.in_use_buffers, after.free_buffers), (1, 4096, 1, 0));
}

#[test]
fn past_the_budget_acquire_falls_back_and_counts_a_miss() {
    let pool = small_pool();
    let largest = pool.acquire(400 * MIB);
    assert_eq!(largest.capacity(), 512 * MIB);
    assert_eq!(pool.stats().allocated_bytes, MIN_TOTAL_BYTES);

    let fallback = pool.acquire(100 * MIB);
    assert_eq!((fallback.len(), fallback.capacity()), (100 * MIB, 100 * MIB));
    let small_fallback = pool.acquire(4096);
    assert_eq!(small_fallback.capacity(), 4096);
    assert_eq!(pool.stats().misses, 2);

    // A fallback is a plain allocation: it never enters a bucket.
    drop((small_fallback, fallback));
    assert_eq!(pool.stats().free_buffers, 0);

    drop(largest);
    let reused = pool.acquire(LARGEST_BUCKET_BYTES);
    assert_eq!(reused.capacity(), LARGEST_BUCKET_BYTES);
    let stats = pool.stats();
    assert_eq!((stats.hits, stats.misses, stats.allocated_bytes), (1, 2, MIN_TOTAL_BYTES));
}

#[test]
fn a_full_bucket_drops_the_extra_buffer_and_its_bytes() {
    let pool = MemoryPool::new(MIN_TOTAL_BYTES, 1).unwrap().leak();
    let (first, second) = (pool.acquire(10), pool.acquire(20));
    assert_eq!(pool.stats().allocated_bytes, 8192);
    drop((first, second));
    let stats = pool.stats();
    assert_eq!((stats.allocated_bytes, stats.free_buffers, stats.in_use_buffers), (4096, 1, 0));
}

#[test]
fn refused_settings_name_the_value() {
    let error = MemoryPool::new(100 * 1024 * 1024, 16).unwrap_err();
    assert_eq!(error, PoolError::TotalTooSmall { total_bytes: 100 * 1024 * 1024 });
    assert!(error.to_string().contains("104857600"), "{error}");
    let error = MemoryPool::new(DEFAULT_TOTAL_BYTES, 8193).unwrap_err();
    assert!(error.to_string().contains("8193"), "{error}");
    assert!(MemoryPool::new(DEFAULT_TOTAL_BYTES, 0).is_err());
    assert!(MemoryPool::new(MIN_TOTAL_BYTES, 8192).is_ok());
}

#[test]
fn plain_buffers_never_enter_the_pool() {
    let pool = small_pool();
    drop(PoolBuf::plain(Vec::with_capacity(4096)));
    drop(PoolBuf::plain(vec![1; 100]));
    assert_eq!(pool.stats(), PoolStats::default());
}

#[test]
fn a_lent_buffer_comes_home_or_is_counted_gone() {
    let pool = small_pool();
    let (vec, home) = pool.acquire(100).into_vec();
    assert_eq!(pool.stats().in_use_buffers, 1);
    drop(PoolBuf::from_vec(vec, home));
    assert_eq!((pool.stats().in_use_buffers, pool.stats().free_buffers), (0, 1));
    // Lost on the way (the IO library dropped it): out of the counts and the budget.
    let (vec, home) = pool.acquire(100).into_vec();
    drop((vec, home));
    assert_eq!(pool.stats(), PoolStats { allocated_bytes: 0, in_use_buffers: 0, free_buffers: 0, hits: 1, misses: 0 });
    // Grown past its bucket while out: kept as a plain allocation.
    let (mut vec, home) = pool.acquire(4096).into_vec();
    vec.reserve(10 * 4096);
    drop(PoolBuf::from_vec(vec, home));
    assert_eq!((pool.stats().in_use_buffers, pool.stats().allocated_bytes), (0, 0));
}

#[test]
fn a_disabled_pool_allocates_plainly() {
    let pool = MemoryPool::disabled().leak();
    assert!(!pool.is_enabled());
    let buf = pool.acquire(10);
    assert_eq!(buf.len(), 10);
    drop(buf);
    drop(pool.acquire(4096));
    assert_eq!(pool.stats(), PoolStats::default());
}

#[test]
fn threads_share_one_pool() {
    fn assert_send_sync<T: Send + Sync>() {}
    assert_send_sync::<MemoryPool>();

    let pool = small_pool();
    let workers: Vec<_> = (0..4)
        .map(|worker| {
            std::thread::spawn(move || {
                for round in 0..1000 {
                    let len = 1 + (worker * 1000 + round) * 37 % (64 * KIB);
                    let mut buf = pool.acquire(len);
                    assert_eq!(buf.len(), len);
                    buf[len - 1] = worker as u8;
                }
            })
        })
        .collect();
    for worker in workers {
        worker.join().unwrap();
    }
    let stats = pool.stats();
    assert_eq!((stats.in_use_buffers, stats.misses), (0, 0));
    assert!(stats.hits > 0 && stats.free_buffers > 0, "{stats:?}");
}
