//! Transparent huge pages off for the whole process.
//!
//! The allocator's arenas are large, aligned regions: where the kernel backs them with 2 MiB
//! huge pages, the first byte a thread touches commits 2 MiB, and memory that is freed stays
//! resident in 2 MiB units. A fresh server held twice the memory it needs, and the first export
//! to a slow reader on PostgreSQL peaked at more than twice what it allocates
//! (docs/PERFORMANCE.md, "Huge pages"). mimalloc is built without asking for them (its `no_thp`
//! feature, for hosts whose THP mode is `madvise`); this turns them off on hosts in `always`
//! mode too, where the kernel would give them unasked.

/// Asks the kernel for no transparent huge pages in this process from now on (Linux's
/// `PR_SET_THP_DISABLE`, which marks the address space, so every thread); an error (another
/// kernel) is only logged, since it costs memory, not correctness.
pub(crate) fn no_huge_pages() {
    #[cfg(target_os = "linux")]
    if let Err(err) = rustix::thread::disable_transparent_huge_pages(true) {
        tracing::debug!("cannot turn transparent huge pages off: {err}");
    }
}

#[cfg(test)]
mod tests {
    use procfs::process::Process;

    use super::no_huge_pages;

    /// The huge pages of the mapping that holds `address`, in bytes.
    fn huge_bytes_at(address: u64) -> u64 {
        let maps = Process::myself()
            .and_then(|me| me.smaps())
            .expect("/proc/self/smaps");
        maps.into_iter()
            .find(|map| (map.address.0..map.address.1).contains(&address))
            .map(|map| map.extension.map.get("AnonHugePages").copied().unwrap_or(0))
            .expect("the allocation is mapped")
    }

    /// The kernel's THP mode (`always`, `madvise` or `never`), when it has them.
    fn thp_mode() -> Option<String> {
        let text = std::fs::read_to_string("/sys/kernel/mm/transparent_hugepage/enabled").ok()?;
        let start = text.find('[')? + 1;
        let end = start + text[start..].find(']')?;
        Some(text[start..end].to_owned())
    }

    #[test]
    fn a_large_allocation_gets_no_huge_pages() {
        match thp_mode().as_deref() {
            None | Some("never") => {
                eprintln!(
                    "SKIPPED a_large_allocation_gets_no_huge_pages: this kernel gives no \
                     transparent huge pages at all"
                );
                return;
            }
            Some(_) => {}
        }
        no_huge_pages();
        // Through the global allocator (mimalloc, as in the binary), untouched, then touched.
        const SIZE: usize = 64 << 20;
        let mut block: Vec<u8> = Vec::with_capacity(SIZE);
        let address = block.as_ptr() as u64;
        let before = huge_bytes_at(address);
        block.resize(SIZE, 1);
        assert_eq!(
            huge_bytes_at(address),
            before,
            "touching 64 MiB of the allocator's memory committed huge pages"
        );
        assert!(block.iter().all(|&byte| byte == 1));
    }
}
