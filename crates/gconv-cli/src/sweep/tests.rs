use super::*;

/// Drives a stand-in worker (a shell) through one problem of three candidates and
/// returns each candidate's status.
fn statuses_with(script: &str) -> Vec<String> {
    let problem = ConvProblem::from_key("v1:fwd:f32:NCHW:n1:c2:k2:i5x5:f3x3:s1x1:p1x1:d1x1").unwrap();
    let items = (0..3).map(|i| ("cpu.x".to_string(), format!("c{i}"))).collect();
    let queue = Queue::listed([Pending { idx: 0, problem, items, vendor: vec![VendorMarks::default(); 3] }]);
    let rows = Mutex::new(Vec::new());
    let sink = |_: &Pending, i: usize, reply: RowReply| -> anyhow::Result<()> {
        rows.lock().unwrap().push((i, reply.status));
        Ok(())
    };
    let start = || {
        let mut command = Command::new("sh");
        command.args(["-c", script]);
        Worker::spawn(command)
    };
    drive_worker(Duration::from_millis(300), &start, &queue, &sink).unwrap();
    let mut rows = rows.into_inner().unwrap();
    rows.sort();
    assert_eq!(rows.iter().map(|r| r.0).collect::<Vec<_>>(), [0, 1, 2], "every candidate gets one row");
    rows.into_iter().map(|r| r.1).collect()
}

#[test]
fn a_hanging_candidate_costs_only_its_row() {
    // Answers the first candidate of each batch, then hangs on the next.
    let statuses = statuses_with(
        r#"read batch; echo '{"built":true}'; echo '{"item":0,"status":"ok","ms":1.0,"workspace_bytes":0}'; exec sleep 30"#,
    );
    assert_eq!(statuses[0], "ok");
    assert!(statuses[1].starts_with("failed: no result within"), "{statuses:?}");
    assert_eq!(statuses[2], "ok", "a new worker takes the rest");
}

/// A vendor library listing configs `e1`, `e2` for every problem, counting its listings.
struct Library {
    listings: std::sync::atomic::AtomicUsize,
}

impl Solver for Library {
    fn id(&self) -> &'static str {
        "lib"
    }

    fn applicable(&self, _p: &ConvProblem) -> Result<(), gconv_core::NotApplicable> {
        Ok(())
    }

    fn configs<'a>(&'a self, _p: &'a ConvProblem) -> Box<dyn Iterator<Item = Config> + 'a> {
        self.listings.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        Box::new((1..=2).map(|e| Config::new([("e", e)])))
    }

    fn find_times_every_config(&self) -> bool {
        true
    }
}

/// A solver of gconv's own with the one config `c1`.
struct Own;

impl Solver for Own {
    fn id(&self) -> &'static str {
        "own"
    }

    fn applicable(&self, _p: &ConvProblem) -> Result<(), gconv_core::NotApplicable> {
        Ok(())
    }

    fn configs<'a>(&'a self, _p: &'a ConvProblem) -> Box<dyn Iterator<Item = Config> + 'a> {
        Box::new(std::iter::once(Config::new([("c", 1)])))
    }
}

#[test]
fn a_resumed_sweep_does_not_list_a_vendor_library_again_where_its_rows_are_in() {
    let library = Library { listings: 0.into() };
    let device = gconv_core::testing::ListingDevice { solvers: vec![&library, &Own], yardstick: None };
    let problems: Vec<ConvProblem> = [2, 4]
        .map(|c| ConvProblem::from_key(&format!("v1:fwd:f32:NCHW:n1:c{c}:k2:i5x5:f3x3:s1x1:p1x1:d1x1")).unwrap())
        .into();
    let done: HashSet<(String, String, String)> =
        ["e1", "e2"].map(|e| (problems[0].key(), "lib".to_string(), e.to_string())).into();
    let queue = Queue::new(None, usize::MAX);
    list(&device, &problems, None, &done, &queue, &ProgressBar::hidden());
    let listed: Vec<(usize, Candidates)> = std::iter::from_fn(|| queue.take()).map(|p| (p.idx, p.items)).collect();
    let item = |s: &str, c: &str| (s.to_string(), c.to_string());
    assert_eq!(
        listed,
        [(0, vec![item("own", "c1")]), (1, vec![item("lib", "e1"), item("lib", "e2"), item("own", "c1")])]
    );
    assert_eq!(library.listings.load(std::sync::atomic::Ordering::Relaxed), 1, "the library listed problem 1 alone");
}

#[test]
fn the_lister_stays_a_few_problems_ahead_of_the_workers() {
    let library = Library { listings: 0.into() };
    let device = gconv_core::testing::ListingDevice { solvers: vec![&library, &Own], yardstick: None };
    let problems: Vec<ConvProblem> = (1..=6)
        .map(|c| ConvProblem::from_key(&format!("v1:fwd:f32:NCHW:n1:c{c}:k2:i5x5:f3x3:s1x1:p1x1:d1x1")).unwrap())
        .collect();
    // No worker takes anything: the lister fills the queue, waits, and stops at the deadline.
    let queue = Queue::new(Some(Instant::now() + Duration::from_millis(300)), 2);
    let listed = list(&device, &problems, None, &HashSet::new(), &queue, &ProgressBar::hidden());
    assert_eq!(queue.left(), 2);
    assert_eq!(listed.problems, 2, "the third problem waited for room until the time was up, then was dropped");
}

#[test]
fn a_crashing_worker_costs_only_the_running_row() {
    let statuses = statuses_with(r#"read batch; echo '{"built":true}'; exit 3"#);
    assert!(statuses.iter().all(|s| s.starts_with("failed: the worker exited") && s.contains('3')), "{statuses:?}");
}
