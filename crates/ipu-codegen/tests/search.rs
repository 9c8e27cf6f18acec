//! The planner's search from outside: a build selecting a given finalist per operation is the
//! same bytes every time, a choice that does not match the plan is refused, a stored
//! incumbent is validated or ignored, and a search budget stops the search and says why.

use ipu_codegen::plan::{Choice, Choices, SearchBudget, SearchStop};
use ipu_codegen::{BuildOptions, Search, build_resuming, build_searched, plan};
use ipu_target::Target;

fn graph(name: &str, params: &[(&str, &str)]) -> ipu_graph::Graph {
    let p: Vec<(String, String)> = params
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    ipu_graph::models::build(name, &p).unwrap()
}

fn options(tiles: u32) -> BuildOptions {
    BuildOptions {
        target: Target::gc200(),
        tiles,
    }
}

fn matmul() -> ipu_graph::Graph {
    graph("matmul", &[("m", "64"), ("k", "64"), ("n", "64")])
}

/// The second finalist of the first operation with a choice.
fn second_finalist(g: &ipu_graph::Graph, tiles: u32) -> Choices {
    let p = plan::plan(g, &Target::gc200(), tiles).unwrap();
    let (op, fs) = plan::finalists_with_choice(&p).into_iter().next().unwrap();
    assert!(fs.len() >= 2, "{fs:?}");
    Choices::from([(
        op,
        Choice {
            finalist: 1,
            mapping: fs[1].mapping.clone(),
        },
    )])
}

#[test]
fn a_chosen_finalist_builds_the_same_bytes_every_time_and_differs_from_the_pick() {
    let g = matmul();
    let choices = second_finalist(&g, 16);
    let search = Search {
        choices,
        ..Default::default()
    };
    let a = build_searched(&g, &options(16), &search).unwrap();
    let b = build_searched(&g, &options(16), &search).unwrap();
    let bytes = a.package.to_bytes().unwrap();
    assert_eq!(bytes, b.package.to_bytes().unwrap());
    let pick = build_searched(&g, &options(16), &Search::default()).unwrap();
    assert_ne!(bytes, pick.package.to_bytes().unwrap());
}

#[test]
fn a_choice_that_does_not_match_the_plan_is_refused() {
    let g = matmul();
    let mut choices = second_finalist(&g, 16);
    let c = choices.values_mut().next().unwrap();
    c.mapping = "another mapping".into();
    let search = Search {
        choices: choices.clone(),
        ..Default::default()
    };
    let e = build_searched(&g, &options(16), &search).unwrap_err();
    assert!(
        e.error.to_string().contains("not `another mapping`"),
        "{}",
        e.error
    );
    choices.values_mut().next().unwrap().finalist = 7;
    let search = Search {
        choices,
        ..Default::default()
    };
    let e = build_searched(&g, &options(16), &search).unwrap_err();
    assert!(e.error.to_string().contains("finalists"), "{}", e.error);
    let search = Search {
        choices: Choices::from([(
            "nosuch".to_string(),
            Choice {
                finalist: 0,
                mapping: String::new(),
            },
        )]),
        ..Default::default()
    };
    let e = build_searched(&g, &options(16), &search).unwrap_err();
    assert!(
        e.error.to_string().contains("no such operation"),
        "{}",
        e.error
    );
}

#[test]
fn an_incumbent_is_used_when_valid_and_ignored_with_its_reason_when_not() {
    let g = matmul();
    let choices = second_finalist(&g, 16);
    let budget = SearchBudget::default();
    let (b, r) = build_resuming(&g, &options(16), Ok(&choices), budget).unwrap();
    assert!(r.resuming);
    let direct = build_searched(
        &g,
        &options(16),
        &Search {
            choices: choices.clone(),
            budget,
        },
    )
    .unwrap();
    assert_eq!(
        b.package.to_bytes().unwrap(),
        direct.package.to_bytes().unwrap()
    );
    let mut wrong = choices;
    wrong.values_mut().next().unwrap().mapping = "stale".into();
    let (b, r) = build_resuming(&g, &options(16), Ok(&wrong), budget).unwrap();
    assert!(!r.resuming);
    assert!(r.reason.unwrap().contains("refused"));
    let pick = build_searched(&g, &options(16), &Search::default()).unwrap();
    assert_eq!(
        b.package.to_bytes().unwrap(),
        pick.package.to_bytes().unwrap()
    );
    let (_, r) = build_resuming(&g, &options(16), Err("none recorded"), budget).unwrap();
    assert_eq!(r.reason.as_deref(), Some("none recorded"));
}

#[test]
fn the_flash_attention_finalists_can_be_chosen() {
    let g = graph("attention-flash", &[("seq", "256"), ("heads", "2")]);
    let choices = second_finalist(&g, 32);
    let search = Search {
        choices,
        ..Default::default()
    };
    let a = build_searched(&g, &options(32), &search).unwrap();
    let pick = build_searched(&g, &options(32), &Search::default()).unwrap();
    assert_ne!(
        a.package.to_bytes().unwrap(),
        pick.package.to_bytes().unwrap()
    );
}

#[test]
fn a_search_budget_stops_the_search_and_says_why() {
    let g = matmul();
    let t = Target::gc200();
    let run = |budget| {
        let none = Default::default();
        plan::plan_searched(
            &g,
            &t,
            16,
            &none,
            plan::SUPPORT_RESERVE_BYTES,
            &Choices::new(),
            budget,
        )
        .unwrap()
        .1
    };
    let full = run(SearchBudget::default());
    assert_eq!(full.stopped, SearchStop::Exhausted);
    assert!(full.examined > 3);
    let bounded = run(SearchBudget::parse("3").unwrap());
    assert_eq!(bounded.stopped, SearchStop::CandidatesReached);
    assert!(bounded.examined < full.examined);
    assert_eq!(SearchBudget::parse("200ms").unwrap().time_max_ms, Some(200));
    let e = SearchBudget::parse("fast").unwrap_err();
    assert!(e.starts_with("`fast` is not a search budget"), "{e}");
}
